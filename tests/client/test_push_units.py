"""Process queues and listener calls of the push consumer, without servers."""

from __future__ import annotations

import logging

import pytest

from rocketspark import ConsumeOrderlyStatus, ConsumeStatus, MessageExt, MessageQueue
from rocketspark.client.consumer.push.listeners import invoke
from rocketspark.client.consumer.push.process_queue import ProcessQueue

QUEUE = MessageQueue("Units", "broker-a", 3)


def message(offset: int, body: bytes = b"xy") -> MessageExt:
    return MessageExt("Units", body, 3, offset, 0, f"id{offset}", "", 0, "", 0, "", broker_name="broker-a")


def test_concurrent_commits_the_smallest_offset_in_flight() -> None:
    pq = ProcessQueue(QUEUE)
    assert pq.remove([message(0)]) is None  # nothing was in flight: nothing to commit
    batch = [message(i) for i in range(10, 15)]
    pq.put(batch)
    pq.put([message(12)])  # a duplicate offset is kept once
    assert (pq.count, pq.size, pq.span) == (5, 10, 4)
    assert pq.remove([batch[1], batch[3]]) == 10  # 10 is still in flight
    assert pq.remove([batch[0]]) == 12
    assert pq.remove([batch[2], batch[4]]) == 15  # empty: one past the highest offset pulled
    assert (pq.count, pq.size) == (0, 0)


def test_orderly_takes_in_order_commits_and_gives_back() -> None:
    pq = ProcessQueue(QUEUE)
    pq.put([message(i) for i in range(5)])
    assert [m.queue_offset for m in pq.take(2)] == [0, 1]
    pq.put([message(5)])
    pq.give_back()
    assert [m.queue_offset for m in pq.take(3)] == [0, 1, 2]
    assert pq.commit() == 3
    assert pq.commit() is None
    assert [m.queue_offset for m in pq.take(10)] == [3, 4, 5]
    assert pq.commit() == 6 and pq.count == 0 and pq.size == 0


def test_a_lock_is_valid_only_while_held_and_fresh() -> None:
    pq = ProcessQueue(QUEUE)
    assert not pq.lock_valid()
    pq.mark_locked(True)
    assert pq.lock_valid()
    pq.last_lock_time -= 31
    assert not pq.lock_valid()


def test_a_raising_or_wrong_listener_counts_as_failed(caplog: pytest.LogCaptureFixture) -> None:
    def raising(messages: list[MessageExt]) -> ConsumeStatus:
        raise ValueError("boom")

    with caplog.at_level(logging.WARNING):
        failed = ConsumeStatus.RECONSUME_LATER
        assert invoke(raising, [message(7)], group="g1", queue=QUEUE, failed=failed) is failed
        assert "group g1 raised on 1 message(s) of topic Units, queue broker-a@3 (first offset 7)" in caplog.text
        assert invoke(lambda m: None, [message(7)], group="g1", queue=QUEUE, failed=failed) is failed
        assert "returned None" in caplog.text
        orderly = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        wrong_kind = invoke(
            lambda m: ConsumeStatus.CONSUME_SUCCESS, [message(7)], group="g", queue=QUEUE, failed=orderly
        )
        assert wrong_kind is orderly
        assert invoke(lambda m: ConsumeOrderlyStatus.SUCCESS, [message(7)], group="g", queue=QUEUE, failed=orderly) is (
            ConsumeOrderlyStatus.SUCCESS
        )
