"""Queue allocation strategies: which queues each member of a consumer group reads.

Pure functions of the sorted queues and sorted consumer ids, as Apache RocketMQ's
`AllocateMessageQueue*` strategies. The Spark source allocates queues to partitions with the same
average strategy (partition i of n reads what consumer i of n would get).
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from rocketspark.protocol.queue import MessageQueue

log = logging.getLogger(__name__)

T = TypeVar("T")

AllocateStrategy = Callable[[str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]


def averagely_by_index(items: Sequence[T], index: int, count: int) -> list[T]:
    """The contiguous block of `items` that member `index` of `count` gets (AllocateMessageQueueAveragely).

    With n items and c members: the first n % c members get n // c + 1 items, the others n // c;
    with n <= c, members below n get one item each and the rest none.
    """
    if count <= 0 or not 0 <= index < count:
        raise ValueError(f"member index {index} is outside 0..{count - 1}")
    n = len(items)
    mod = n % count
    if n <= count:
        size = 1
    elif index < mod:
        size = n // count + 1
    else:
        size = n // count
    start = index * size if index < mod else index * size + mod
    return list(items[start : start + max(0, min(size, n - start))])


def _check(current_id: str, queues: Sequence[MessageQueue], consumer_ids: Sequence[str]) -> int | None:
    """The index of `current_id` among the sorted ids; None when it is not a member (as Java)."""
    if not current_id:
        raise ValueError("the current consumer id is empty")
    if not queues:
        raise ValueError("there are no queues to allocate")
    if not consumer_ids:
        raise ValueError("the consumer id list is empty")
    ordered = sorted(consumer_ids)
    if current_id not in ordered:
        log.info("consumer %s is not among the group's members %s; it gets no queue", current_id, ordered)
        return None
    return ordered.index(current_id)


def allocate_averagely(
    current_id: str, queues: Sequence[MessageQueue], consumer_ids: Sequence[str]
) -> list[MessageQueue]:
    """AVG: contiguous blocks of the sorted queues, the default strategy."""
    index = _check(current_id, queues, consumer_ids)
    if index is None:
        return []
    return averagely_by_index(sorted(queues), index, len(consumer_ids))


def allocate_averagely_by_circle(
    current_id: str, queues: Sequence[MessageQueue], consumer_ids: Sequence[str]
) -> list[MessageQueue]:
    """AVG_BY_CIRCLE: queue i goes to consumer i mod c."""
    index = _check(current_id, queues, consumer_ids)
    if index is None:
        return []
    return sorted(queues)[index :: len(consumer_ids)]


def _md5_hash(key: str) -> int:
    """Java's `MD5Hash.hash`: the first four digest bytes as an unsigned number."""
    digest = hashlib.md5(key.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big")


def _java_queue_text(queue: MessageQueue) -> str:
    return f"MessageQueue [topic={queue.topic}, brokerName={queue.broker_name}, queueId={queue.queue_id}]"


class ConsistentHashAllocator:
    """CONSISTENT_HASH: members on a hash ring with virtual nodes; a queue goes to the next node."""

    def __init__(self, virtual_nodes: int = 10) -> None:
        if virtual_nodes <= 0:
            raise ValueError(f"virtual_nodes must be positive, got {virtual_nodes}")
        self.virtual_nodes = virtual_nodes

    def __call__(
        self, current_id: str, queues: Sequence[MessageQueue], consumer_ids: Sequence[str]
    ) -> list[MessageQueue]:
        if _check(current_id, queues, consumer_ids) is None:
            return []
        ring = sorted(
            (_md5_hash(f"{member}-{i}"), member) for member in consumer_ids for i in range(self.virtual_nodes)
        )
        hashes = [h for h, _ in ring]
        chosen = []
        for queue in sorted(queues):
            position = bisect.bisect_left(hashes, _md5_hash(_java_queue_text(queue)))
            if ring[position % len(ring)][1] == current_id:
                chosen.append(queue)
        return chosen


STRATEGIES: dict[str, AllocateStrategy] = {
    "AVG": allocate_averagely,
    "AVG_BY_CIRCLE": allocate_averagely_by_circle,
    "CONSISTENT_HASH": ConsistentHashAllocator(),
}


def strategy(name: str) -> AllocateStrategy:
    try:
        return STRATEGIES[name.upper()]
    except KeyError:
        raise ValueError(f"unknown allocation strategy {name!r}; choose one of {', '.join(STRATEGIES)}") from None
