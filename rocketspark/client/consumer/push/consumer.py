"""`AsyncPushConsumer`: subscribe, register a listener, start; messages arrive by themselves.

The rebalance runs every `rebalance_interval_ms` and at once when a broker announces that the
group's members changed (NOTIFY_CONSUMER_IDS_CHANGED): the configured allocation strategy over the
group's sorted client ids gives this member its queues. A queue taken away stops pulling, waits for
its batches in the listener, commits its offset and (orderly) releases its broker lock; an orderly
queue whose batch is still in the listener after `DROP_WAIT_S` keeps its lock (renewed with the
others) until the listener returns, so that no other member consumes it meanwhile. A queue
gained starts from the group's committed offset (or `consume_from_where` without one). Offsets are
persisted every `persist_consumer_offset_interval_ms` of the client config and at shutdown: to the
brokers in CLUSTERING, to a local file in BROADCASTING.

In CLUSTERING the group also consumes its retry topic, %RETRY%<group>, where the broker redelivers
the messages a listener failed (rocketspark/client/consumer/push/send_back.py).

An admin tool's reset of the group's offsets to a time (INVOKE_BROKER_TO_RESET_OFFSET, relayed by
each broker as RESET_CONSUMER_CLIENT_OFFSET) is done as Java's MQClientInstance.resetOffset does it:
the member's queues of the topic are dropped as a rebalance drops them, the broker's offsets are
committed in place of their own, and a rebalance at once takes them again from there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from rocketspark.aio import wait_until
from rocketspark.client.config import ClientConfig, client_config_for
from rocketspark.client.consumer import allocation
from rocketspark.client.consumer.offset_store import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore
from rocketspark.client.consumer.puller import QueuePuller
from rocketspark.client.consumer.push.consume_concurrently import ConcurrentConsumeService
from rocketspark.client.consumer.push.consume_orderly import OrderlyConsumeService
from rocketspark.client.consumer.push.listeners import ConcurrentListener, OrderlyListener
from rocketspark.client.consumer.push.locks import QueueLocks
from rocketspark.client.consumer.push.options import PushOptions
from rocketspark.client.consumer.push.process_queue import Backlog, ProcessQueue
from rocketspark.client.consumer.push.pull_service import PullService
from rocketspark.client.consumer.push.send_back import MessageReturner, restore_original_topics
from rocketspark.client.consumer.rebalance import Rebalancer
from rocketspark.client.consumer.start_offset import compute_start_offset
from rocketspark.client.instance import ClientInstance, ConsumerRegistration, unique_instance_name
from rocketspark.client.lifecycle import AsyncClient, Lifecycle, ServiceState
from rocketspark.errors import RocketMQError, TopicNotExistError, ValidationError
from rocketspark.message.filter import build_subscription
from rocketspark.message.message import MessageExt
from rocketspark.message.validation import retry_topic, validate_topic
from rocketspark.protocol.body.heartbeat import ConsumerData, ConsumeType, MessageModel
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.signing import SessionCredentials
from rocketspark.remoting.tls import TrustSetting
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)

#: how long dropping a queue waits for its batches already in the listener
DROP_WAIT_S = 10.0
#: how long shutdown waits for the consume threads to finish
POOL_SHUTDOWN_WAIT_S = 10.0
#: how soon a rebalance tries again to lock queues another member still held (orderly), or to find
#: the route of the group's retry topic, which the broker creates on the group's first heartbeat...
REBALANCE_RETRY_S = 1.0
#: ... at most this many times in a row (then the next periodic rebalance looks again)
RETRY_TOPIC_ROUTE_TRIES = 10


async def _stop_pool(executor: concurrent.futures.ThreadPoolExecutor, timeout_s: float) -> bool:
    """Shut the pool down and wait for its threads (at most `timeout_s`) without blocking the loop.

    A thread of its own does the waiting, not the loop's default executor, whose idle thread would
    outlive the consumer.
    """
    loop = asyncio.get_running_loop()
    joined = loop.create_future()

    def finish() -> None:
        if not joined.done():
            joined.set_result(None)

    def stop() -> None:
        executor.shutdown(wait=True, cancel_futures=True)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(finish)

    threading.Thread(target=stop, name="push-consumer-pool-shutdown", daemon=True).start()
    return await wait_until(joined, timeout_s)


@dataclasses.dataclass(frozen=True, slots=True)
class _Running:
    instance: ClientInstance
    store: OffsetStore
    pulls: PullService
    consume: ConcurrentConsumeService | OrderlyConsumeService
    locks: QueueLocks
    executor: concurrent.futures.ThreadPoolExecutor


class AsyncPushConsumer(AsyncClient):
    """A push consumer for asyncio code; options are :class:`~rocketspark.client.consumer.push.options.PushOptions`.

    Without `client_config`, each consumer gets an instance name (and so a client id) of its own,
    `pid#nanotime`: two consumers of one group in one process are two members of the group.
    With `credentials`, every request is signed (ACL 1.0); with `use_tls`, every connection is TLS
    (certificates verified against `tls_trust`, see :mod:`rocketspark.remoting.tls`).
    """

    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | None = None,
        client_config: ClientConfig | None = None,
        credentials: SessionCredentials | None = None,
        use_tls: bool = False,
        tls_trust: TrustSetting = None,
        **options: Any,
    ) -> None:
        self.group = group
        self.options = PushOptions.of(options)
        config = client_config_for(client_config, namesrv_addr, credentials, use_tls, tls_trust)
        if config.instance_name == "DEFAULT":
            config = dataclasses.replace(config, instance_name=unique_instance_name())
        self.client_config = config
        self.consume_timestamp_ms = self.options.consume_timestamp_ms or int(time.time() * 1000) - 30 * 60 * 1000
        self._expressions: dict[str, str] = {}
        self._registered_topics: set[str] = set()  # the topics whose brokers the last heartbeat went to
        self._listener: ConcurrentListener | OrderlyListener | None = None
        self.orderly = False
        self._lifecycle = Lifecycle(f"push consumer {group}")
        self._running_parts: _Running | None = None
        self._queues: dict[MessageQueue, ProcessQueue] = {}
        #: orderly clustering: queues given up whose batch is still in the listener, still locked
        self._releasing: dict[MessageQueue, tuple[ProcessQueue, asyncio.Task[None]]] = {}
        self._rebalance_lock = asyncio.Lock()
        self._rebalance_later: asyncio.TimerHandle | None = None
        self._resets: dict[MessageQueue, int] = {}  # queue -> offset a reset commits once it is released
        self._reset_tasks: set[asyncio.Task[None]] = set()
        self._retry_route_misses = 0
        self._rebalance_service = PeriodicService(
            "push-rebalance", self.options.rebalance_interval_ms / 1000, self._rebalance, initial_delay_s=0
        )
        self._persist_service = PeriodicService(
            "push-persist-offsets", config.persist_consumer_offset_interval_ms / 1000, self._persist
        )
        self._lock_service = PeriodicService(
            "push-lock-queues", self.options.rebalance_lock_interval_ms / 1000, self._lock_all
        )

    # -- what to consume and how ---------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume `topic` (messages matching the tag expression, e.g. "created || paid"); several topics allowed."""
        validate_topic(topic)
        build_subscription(topic, expression)  # validates the expression
        self._expressions[topic] = expression
        if self._rebalance_service.running:
            self._rebalance_service.trigger()

    def register_listener(self, listener: ConcurrentListener | OrderlyListener, *, orderly: bool = False) -> None:
        """`listener(messages) -> ConsumeStatus`, or with `orderly=True` `-> ConsumeOrderlyStatus`.

        It runs on the consume threads, never on the event loop; it may block.
        """
        if self._lifecycle.state is not ServiceState.CREATE_JUST:
            raise ValidationError("register the listener before start()")
        self._listener = listener
        self.orderly = orderly

    def assignment(self) -> set[MessageQueue]:
        """The queues of the subscribed topics this member consumes now (its group's retry topic aside)."""
        own_retry_topic = retry_topic(self.group)
        return {queue for queue in self._queues if queue.topic != own_retry_topic}

    def backlog(self) -> dict[MessageQueue, Backlog]:
        """Per queue of :meth:`assignment`: the messages pulled and not consumed yet (what flow control bounds)."""
        return {queue: self._queues[queue].backlog() for queue in self.assignment()}

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            self.group,
            consume_type=ConsumeType.CONSUME_PASSIVELY,
            message_model=self.options.message_model,
            consume_from_where=self.options.consume_from_where,
            subscription_data_set=[build_subscription(t, e) for t, e in sorted(self._expressions.items())],
        )

    def _expression(self, topic: str) -> str:
        return self._expressions.get(topic, "*")

    @property
    def _locking(self) -> bool:
        return self.orderly and self.options.message_model is MessageModel.CLUSTERING

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._listener is None:
            raise ValidationError(f"push consumer {self.group}: register_listener() before start()")
        self._lifecycle.begin_start()
        if self.options.message_model is MessageModel.CLUSTERING:  # as Java's copySubscription
            self._expressions[retry_topic(self.group)] = "*"
        try:
            instance = await ClientInstance.acquire(self.client_config)
            try:
                store = self._offset_store(instance)
                await store.load()
                instance.register_consumer(
                    ConsumerRegistration(
                        self.group,
                        self._consumer_data,
                        self._expressions.keys,
                        self._rebalance_service.trigger,
                        self._reset_notice,
                    )
                )
            except BaseException:
                await instance.release()
                raise
        except BaseException:
            self._lifecycle.state = ServiceState.START_FAILED
            raise
        executor = concurrent.futures.ThreadPoolExecutor(
            self.options.consume_thread_max, thread_name_prefix=f"ConsumeMessageThread_{self.group}"
        )
        locks = QueueLocks(instance, self.group)
        consume: ConcurrentConsumeService | OrderlyConsumeService
        if self.orderly:
            orderly = cast(OrderlyListener, self._listener)
            consume = OrderlyConsumeService(orderly, executor, store, self.options, self.group, self._relock)
        else:
            concurrent_listener = cast(ConcurrentListener, self._listener)
            returner = None
            if self.options.message_model is MessageModel.CLUSTERING:
                returner = MessageReturner(instance, self.group, self.options.max_reconsume_times)
            consume = ConcurrentConsumeService(concurrent_listener, executor, store, self.options, self.group, returner)

        def dispatch(pq: ProcessQueue, messages: list[MessageExt]) -> None:
            restore_original_topics(messages, self.group)
            consume.submit(pq, messages)

        pulls = PullService(
            QueuePuller(instance, self.group, use_arrow=False),
            store,
            self.options,
            expression=self._expression,
            dispatch=dispatch,
            orderly=self.orderly,
        )
        self._running_parts = _Running(instance, store, pulls, consume, locks, executor)
        self._lifecycle.state = ServiceState.RUNNING
        await self._register_with_brokers()
        self._rebalance_service.start()
        self._persist_service.start()
        if self._locking:
            self._lock_service.start()
        log.info("push consumer %s started as %s", self.group, instance.client_id)

    def _offset_store(self, instance: ClientInstance) -> OffsetStore:
        if self.options.message_model is MessageModel.BROADCASTING:
            directory = self.options.offset_store_dir or Path.home() / ".rocketmq_offsets"
            return LocalFileOffsetStore(directory / instance.client_id, self.group)
        return RemoteBrokerOffsetStore(instance, self.group)

    async def shutdown(self) -> None:
        """Stop consuming: commit every queue's offset, release the orderly locks, leave the group."""
        parts = self._running_parts
        if self._lifecycle.state is not ServiceState.RUNNING or parts is None:
            return
        if self._rebalance_later is not None:
            self._rebalance_later.cancel()
        for service in (self._rebalance_service, self._lock_service, self._persist_service):
            await service.stop()
        await asyncio.gather(*self._reset_tasks, return_exceptions=True)
        async with self._rebalance_lock:
            await self._drop(list(self._queues.values()))
            await self._release_finished()
            await self._abandon_releasing()
        self._lifecycle.state = ServiceState.SHUTDOWN_ALREADY
        await parts.instance.unregister_consumer(self.group)
        await parts.instance.release()
        if not await _stop_pool(parts.executor, POOL_SHUTDOWN_WAIT_S):
            log.warning(
                "push consumer %s: listeners still running %.0f s after shutdown", self.group, POOL_SHUTDOWN_WAIT_S
            )
        log.info("push consumer %s shut down", self.group)

    def _parts(self) -> _Running:
        self._lifecycle.require_running()
        assert self._running_parts is not None
        return self._running_parts

    # -- rebalance -----------------------------------------------------------------------------

    async def _register_with_brokers(self) -> None:
        """Learn the brokers of the subscribed topics and tell them this member exists."""
        instance = self._parts().instance
        self._registered_topics = set(self._expressions)
        for topic in sorted(self._expressions):
            try:
                await instance.route(topic)
            except RocketMQError as exc:  # the retry topic is created by this very heartbeat
                level = logging.DEBUG if topic == retry_topic(self.group) else logging.WARNING
                log.log(level, "route of %s: %s", topic, exc)
        await instance.heartbeat()

    async def _rebalance(self) -> None:
        async with self._rebalance_lock:
            if self._lifecycle.state is ServiceState.RUNNING:
                await self._rebalance_now()

    async def _rebalance_now(self) -> None:
        parts = self._parts()
        if self._registered_topics != self._expressions.keys():  # subscribed since: tell their brokers first
            await self._register_with_brokers()
        await self._release_finished()
        rebalancer = Rebalancer(
            parts.instance, self.group, allocation.strategy(self.options.allocate_strategy), self.options.message_model
        )
        target: set[MessageQueue] = set()
        for topic in sorted(self._expressions):
            try:
                queues = await rebalancer.assignment(topic)
            except RocketMQError as exc:
                queues = None
                retry_route_missing = topic == retry_topic(self.group) and isinstance(exc, TopicNotExistError)
                if retry_route_missing and self._retry_route_misses < RETRY_TOPIC_ROUTE_TRIES:
                    self._retry_route_misses += 1  # the broker registers it just after the first heartbeat
                    log.debug("group %s: no route for its retry topic yet; trying again soon", self.group)
                    self._rebalance_soon()
                else:
                    log.warning("group %s cannot rebalance topic %s now: %s", self.group, topic, exc)
            else:
                if topic == retry_topic(self.group):
                    self._retry_route_misses = 0
            if queues is None:  # unknown now: keep what this topic had
                target.update(q for q in self._queues if q.topic == topic)
            else:
                target.update(queues)
        gone = [pq for queue, pq in self._queues.items() if queue not in target]
        if gone:
            log.info("group %s gives up %s", self.group, ", ".join(str(pq.queue) for pq in gone))
            await self._drop(gone)
        gained = sorted(target - self._queues.keys() - self._releasing.keys())  # releasing: regained once released
        if gained and self._locking:
            locked = await parts.locks.lock(gained)
            refused = [q for q in gained if q not in locked]
            if refused:  # most often the previous owner has not released them yet: try again soon
                log.info("group %s: %s still locked by another member", self.group, ", ".join(map(str, refused)))
                self._rebalance_soon()
            gained = [q for q in gained if q in locked]
        for queue in gained:
            try:
                start = await compute_start_offset(
                    parts.instance, parts.store, queue, self.options.consume_from_where, self.consume_timestamp_ms
                )
            except RocketMQError as exc:
                log.warning("group %s cannot start consuming %s yet: %s", self.group, queue, exc)
                if self._locking:
                    await parts.locks.unlock([queue])
                continue
            log.info("group %s consumes %s from offset %d", self.group, queue, start)
            pq = ProcessQueue(queue)
            pq.mark_locked(self._locking)
            self._queues[queue] = pq
            parts.pulls.start(pq, start)

    def _rebalance_soon(self) -> None:
        if self._rebalance_later is not None:
            self._rebalance_later.cancel()
        self._rebalance_later = asyncio.get_running_loop().call_later(
            REBALANCE_RETRY_S, self._rebalance_service.trigger
        )

    async def _drop(self, queues: list[ProcessQueue]) -> None:
        """Stop pulling and consuming `queues`, commit their offsets, then release their locks.

        An orderly queue whose batch is still in the listener is released only once it returns
        (:meth:`_release_finished`, run by the rebalance that the listener's return triggers).
        """
        parts = self._parts()
        for pq in queues:
            pq.dropped = True
        for pq in queues:
            await parts.pulls.stop(pq)
        busy = await parts.consume.drain(queues, DROP_WAIT_S)
        for pq, task in busy.items():
            self._queues.pop(pq.queue, None)
            self._releasing[pq.queue] = (pq, task)
            task.add_done_callback(lambda _: self._rebalance_service.trigger())
        await self._release([pq for pq in queues if pq not in busy])

    async def _release(self, queues: list[ProcessQueue]) -> None:
        """Forget dropped `queues` whose listener is done: commit their offsets (those a reset set,
        in place of their own), release their locks."""
        if not queues:
            return
        parts = self._parts()
        for pq in queues:
            pq.removed = True
            self._queues.pop(pq.queue, None)
            if (reset_to := self._resets.pop(pq.queue, None)) is not None:
                parts.store.update_offset(pq.queue, reset_to, increase_only=False)
        dropped = {pq.queue for pq in queues}
        await parts.store.persist_all(set(self._queues) | dropped)
        for queue in dropped:
            parts.store.remove_offset(queue)
        if self._locking:
            await parts.locks.unlock(dropped)

    async def _release_finished(self) -> None:
        """Release the queues given up earlier whose listener has returned since."""
        done = [pq for pq, task in self._releasing.values() if task.done()]
        if done:
            log.info("group %s releases %s, the listener done", self.group, ", ".join(str(pq.queue) for pq in done))
            await self._release(done)
            for pq in done:
                del self._releasing[pq.queue]

    async def _abandon_releasing(self) -> None:
        """Shutdown: queues whose listener still runs keep what they committed before, and are not
        unlocked; their broker locks expire."""
        if self._releasing:
            log.warning(
                "push consumer %s: the listener still holds batches of %s; their broker locks are left to expire",
                self.group,
                ", ".join(str(queue) for queue in self._releasing),
            )
            await self._parts().store.persist_all(set(self._releasing))
        tasks = [task for _, task in self._releasing.values()]
        self._releasing.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _reset_notice(self, topic: str, offsets: Mapping[MessageQueue, int]) -> None:
        """A broker's RESET_CONSUMER_CLIENT_OFFSET (the client instance's hook): reset in the background."""
        task = asyncio.get_running_loop().create_task(self._reset(topic, offsets), name=f"push reset {topic}")
        self._reset_tasks.add(task)
        task.add_done_callback(self._reset_tasks.discard)

    async def _reset(self, topic: str, offsets: Mapping[MessageQueue, int]) -> None:
        """Consume this member's queues of `topic` from `offsets` on: pulls stop, what was pulled is
        dropped (batches in the listener are waited for, as a rebalance waits), the offsets are
        committed and the queues taken again from them."""
        async with self._rebalance_lock:
            if self._lifecycle.state is not ServiceState.RUNNING:
                return
            queues = [pq for queue, pq in self._queues.items() if queue.topic == topic and queue in offsets]
            if not queues:
                return
            log.info("group %s resets %s", self.group, ", ".join(f"{pq.queue} to {offsets[pq.queue]}" for pq in queues))
            self._resets.update((pq.queue, offsets[pq.queue]) for pq in queues)
            await self._drop(queues)
        self._rebalance_service.trigger()

    # -- timers --------------------------------------------------------------------------------

    async def _persist(self) -> None:
        await self._parts().store.persist_all(set(self._queues))

    async def _lock_all(self) -> None:
        """Renew the broker locks of every owned or releasing queue; a queue whose lock is lost stops
        being consumed. Under the rebalance lock, so that no renewal lands after a release's unlock."""
        async with self._rebalance_lock:
            if self._lifecycle.state is not ServiceState.RUNNING:
                return
            owned = {**self._queues, **{queue: pq for queue, (pq, _) in self._releasing.items()}}
            locked = await self._parts().locks.lock(owned)
            for queue, pq in owned.items():
                if queue not in locked and pq.locked:
                    log.warning("group %s lost the lock of %s", self.group, queue)
                pq.mark_locked(queue in locked)

    async def _relock(self, pq: ProcessQueue) -> bool:
        locked = pq.queue in await self._parts().locks.lock([pq.queue])
        pq.mark_locked(locked)
        return locked
