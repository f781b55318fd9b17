"""Allocation strategies as pure functions (reference §5.1)."""

from __future__ import annotations

import pytest

from rocketspark.client.consumer.allocation import (
    ConsistentHashAllocator,
    allocate_averagely,
    allocate_averagely_by_circle,
    averagely_by_index,
    strategy,
)
from rocketspark.protocol.queue import MessageQueue


def queues(n: int, brokers: tuple[str, ...] = ("broker-a",)) -> list[MessageQueue]:
    return [MessageQueue("T", b, i) for b in brokers for i in range(n)]


def ids(count: int) -> list[str]:
    return [f"10.0.0.{i}@{i}" for i in range(count)]


@pytest.mark.parametrize(
    ("queue_count", "consumers", "expected"),
    [
        (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
        (2, 3, [[0], [1], []]),
        (4, 4, [[0], [1], [2], [3]]),
        (9, 2, [[0, 1, 2, 3, 4], [5, 6, 7, 8]]),
        (1, 1, [[0]]),
    ],
)
def test_averagely_matches_java(queue_count: int, consumers: int, expected: list[list[int]]) -> None:
    members = ids(consumers)
    allocated = [[q.queue_id for q in allocate_averagely(m, queues(queue_count), members)] for m in members]
    assert allocated == expected
    assert [averagely_by_index(list(range(queue_count)), i, consumers) for i in range(consumers)] == expected


def test_inputs_are_sorted_before_allocation() -> None:
    mixed = list(reversed(queues(4, ("broker-b", "broker-a"))))
    first = allocate_averagely("c1", mixed, ["c2", "c1"])
    assert first == [MessageQueue("T", "broker-a", i) for i in range(4)]


def test_by_circle() -> None:
    members = ids(3)
    assert [[q.queue_id for q in allocate_averagely_by_circle(m, queues(8), members)] for m in members] == [
        [0, 3, 6],
        [1, 4, 7],
        [2, 5],
    ]


def test_consistent_hash_covers_every_queue_once_and_is_stable() -> None:
    members = ids(3)
    allocator = ConsistentHashAllocator()
    shares = [allocator(m, queues(16), members) for m in members]
    assert sorted(q for share in shares for q in share) == queues(16)
    assert shares == [allocator(m, queues(16), members) for m in members]
    # a fourth member takes queues from the others without reshuffling the rest
    after = [allocator(m, queues(16), [*members, "10.0.0.9@9"]) for m in members]
    assert all(set(a) <= set(b) for a, b in zip(after, shares, strict=True))


def test_non_member_and_bad_input() -> None:
    assert allocate_averagely("stranger", queues(4), ids(2)) == []
    with pytest.raises(ValueError, match="empty"):
        allocate_averagely("", queues(4), ids(2))
    with pytest.raises(ValueError, match="no queues"):
        allocate_averagely("a", [], ["a"])
    with pytest.raises(ValueError, match="unknown allocation strategy"):
        strategy("RANDOM")
    assert strategy("avg") is allocate_averagely
