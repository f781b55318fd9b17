"""The push consumer: pulls in the background and hands messages to a listener in a thread pool.

As Apache RocketMQ's DefaultMQPushConsumer: a rebalance decides which queues this member owns
(`consumer.py`), one long-polling pull loop per owned queue fills that queue's `ProcessQueue`
(`pull_service.py`), and a consume service calls the listener: concurrently over the pool
(`consume_concurrently.py`) or one batch of one queue at a time, under broker locks
(`consume_orderly.py`, `locks.py`). The committed offset of a queue is the smallest offset still in flight.
"""
