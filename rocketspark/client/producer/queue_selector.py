"""Choosing the queue a message goes to: round robin avoiding a broker that just failed, or by key."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

from rocketspark.message.hashing import java_string_hash
from rocketspark.protocol.queue import MessageQueue


class RoundRobinSelector:
    """Java's `TopicPublishInfo.selectOneMessageQueue`: the next queue, skipping `avoid_broker`.

    Like Java's `ThreadLocalIndex`, it starts at a random index, so many short-lived producers (one
    per Spark worker, say) do not all begin with the first broker's first queue."""

    def __init__(self) -> None:
        self._counter = itertools.count(random.randrange(1 << 16))

    def select(self, queues: Sequence[MessageQueue], avoid_broker: str | None = None) -> MessageQueue:
        if not queues:
            raise ValueError("no writable queue to send to")
        if avoid_broker is not None:
            for _ in range(len(queues)):
                queue = queues[next(self._counter) % len(queues)]
                if queue.broker_name != avoid_broker:
                    return queue
        return queues[next(self._counter) % len(queues)]


def select_by_key(queues: Sequence[MessageQueue], sharding_key: str) -> MessageQueue:
    """Java's `SelectMessageQueueByHash`: |String.hashCode| modulo the queue count, so one key
    always lands in the queue a Java producer would choose."""
    if not queues:
        raise ValueError("no writable queue to send to")
    return queues[abs(java_string_hash(sharding_key)) % len(queues)]
