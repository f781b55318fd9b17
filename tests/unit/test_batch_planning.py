"""The driver's micro-batch planning (`observe`, `settle_missing`, `plan_batch`, `reachable_end`) for
every branch, against a fake cluster view: no Spark, no servers (as Kafka's connector tests its
offset range calculator)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest

from rocketspark.errors import DataLossError
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.source.planning import (
    BatchRules,
    Observed,
    Offsets,
    observe,
    plan_batch,
    reachable_end,
    settle_missing,
)

A0, A1, A2, A3 = (MessageQueue("T", "broker-a", i) for i in range(4))
B0, B1 = (MessageQueue("T", "broker-b", i) for i in range(2))


@dataclass
class FakeView:
    """A cluster as planning sees it: max and min offsets of the queues whose broker answers,
    registered brokers; records what it was asked."""

    max: Offsets = field(default_factory=dict)
    min: Offsets = field(default_factory=dict)
    live: set[str] = field(default_factory=lambda: {"broker-a", "broker-b"})
    silent: set[str] = field(default_factory=set)  # brokers that do not answer
    unreachable: dict[MessageQueue, str] = field(default_factory=dict)
    asked_min: list[MessageQueue] = field(default_factory=list)

    def _answer(self, offsets: Offsets, queues: Iterable[MessageQueue]) -> Offsets:
        answers = {}
        for queue in queues:
            if queue.broker_name in self.silent:
                self.unreachable[queue] = f"broker {queue.broker_name} does not answer"
            else:
                answers[queue] = offsets[queue]
        return answers

    def live_brokers(self) -> set[str]:
        return set(self.live)

    def max_offsets(self, queues: Iterable[MessageQueue]) -> Offsets:
        return self._answer(self.max, queues)

    def min_offsets(self, queues: Iterable[MessageQueue]) -> Offsets:
        queues = list(queues)
        self.asked_min.extend(queues)
        return self._answer(self.min, queues)


def rules(
    *,
    fail: bool = True,
    placed: Offsets | None = None,
    max_rows: int | None = None,
    target: Offsets | None = None,
) -> BatchRules:
    """Rules whose placement of first-seen queues answers from `placed` (and fails for others)."""

    def place(queues: list[MessageQueue]) -> Offsets:
        assert placed is not None, f"no queue was to be placed, got {queues}"
        return {q: placed[q] for q in queues if q in placed}

    return BatchRules(fail_on_data_loss=fail, place=place, max_rows=max_rows, target=target)


def plan(view: FakeView, begin: Offsets, queues: list[MessageQueue], batch_rules: BatchRules) -> Offsets:
    return plan_batch(view, observe(view, begin, queues), batch_rules).ends


def test_queues_advance_to_their_max_offsets_and_stay_where_nothing_is_new() -> None:
    view = FakeView(max={A0: 10, A1: 5})
    assert plan(view, {A0: 3, A1: 5}, [A0, A1], rules()) == {A0: 10, A1: 5}
    assert plan(view, {A0: 10, A1: 5}, [A0, A1], rules()) == {A0: 10, A1: 5}  # Spark runs no batch
    assert view.asked_min == []


def test_a_queue_seen_for_the_first_time_joins_where_it_is_placed_and_is_read_from_the_next_batch() -> None:
    view = FakeView(max={A0: 10, A1: 50})
    result = plan_batch(view, observe(view, {A0: 10}, [A0, A1]), rules(placed={A1: 20}))
    assert result.ends == {A0: 10, A1: 20} and result.placed == {A1: 20}
    assert plan(view, result.ends, [A0, A1], rules()) == {A0: 10, A1: 50}


def test_a_first_seen_queue_the_placement_leaves_out_is_placed_when_seen_again() -> None:
    view = FakeView(max={A0: 10, A1: 50})
    assert plan(view, {A0: 10}, [A0, A1], rules(placed={})) == {A0: 10}


def test_a_queue_of_a_broker_that_left_the_routes_waits_with_its_offset() -> None:
    view = FakeView(max={A0: 10}, live={"broker-a"})
    observed = observe(view, {A0: 0, B0: 7}, [A0])
    assert observed.waiting == {B0: "broker broker-b is not registered"} and not observed.lost
    assert plan_batch(view, observed, rules()).ends == {A0: 10, B0: 7}


def test_a_broker_that_registers_while_the_routes_are_read_is_waited_for_not_lost() -> None:
    """broker-b came back between the routes (read without it) and the question of which brokers are
    registered: its queues wait for the next batch instead of counting as lost (CI: a restarted
    broker failed a query with DataLossError)."""
    view = FakeView(max={A0: 10}, live={"broker-a", "broker-b"})
    observed = observe(view, {A0: 0, B0: 7}, [A0], live_before={"broker-a"})
    assert observed.waiting == {B0: "broker broker-b is not registered"} and not observed.lost
    assert plan_batch(view, observed, rules()).ends == {A0: 10, B0: 7}


def test_a_queue_whose_broker_does_not_answer_keeps_its_offset() -> None:
    view = FakeView(max={A0: 10, B0: 30}, silent={"broker-b"})
    observed = observe(view, {A0: 0, B0: 7}, [A0, B0])
    assert set(observed.waiting) == {B0} and B0 not in observed.latest
    assert plan_batch(view, observed, rules()).ends == {A0: 10, B0: 7}


def test_settle_missing_asks_for_the_brokers_only_when_a_queue_is_missing() -> None:
    view = FakeView(live=set())  # every queue would wait if the brokers were asked
    assert settle_missing(view, {A0: 1}, {A0}) == ({A0: 1}, {}, {})
    kept, waiting, lost = settle_missing(FakeView(live={"broker-a"}), {A0: 1, A1: 2, B0: 3}, {A0})
    assert kept == {A0: 1, B0: 3} and set(waiting) == {B0} and lost == {A1: 2}


def test_a_queue_gone_from_the_routes_of_a_registered_broker_is_data_loss() -> None:
    view = FakeView(max={A0: 10})
    observed = observe(view, {A0: 0, A3: 5}, [A0])
    assert observed.lost == {A3: 5}
    with pytest.raises(DataLossError, match=r"topic T, broker broker-a, queue 3 \(the query is at offset 5\)"):
        plan_batch(view, observed, rules())
    assert plan_batch(view, observed, rules(fail=False)).ends == {A0: 10}  # going on without it


def test_offsets_that_went_back_fail_naming_every_queue() -> None:
    view = FakeView(max={A0: 40, A1: 0, A2: 200}, min={A0: 0, A1: 0})
    observed = observe(view, {A0: 100, A1: 100, A2: 100}, [A0, A1, A2])
    assert observed.moved_back == [A0, A1]
    with pytest.raises(DataLossError) as error:
        plan_batch(view, observed, rules())
    message = str(error.value)
    assert "topic T, broker broker-a, queue 0 ends at offset 40 but the query is at 100" in message
    assert "queue 1 ends at offset 0 but the query is at 100" in message and "queue 2" not in message
    assert "set failOnDataLoss=false" in message


def test_offsets_that_went_back_restart_at_the_first_message_then_are_read_from_there() -> None:
    view = FakeView(max={A0: 40, A1: 200}, min={A0: 3})
    result = plan_batch(view, observe(view, {A0: 100, A1: 100}, [A0, A1]), rules(fail=False))
    assert result.restarted == {A0: 3}
    assert result.ends == {A0: 3, A1: 200}  # this batch reads nothing of A0: [100, 3) is empty
    view.max[A0] = 45
    assert plan(view, result.ends, [A0, A1], rules(fail=False)) == {A0: 45, A1: 200}
    assert view.asked_min == [A0]  # asked once, when the queue went back


def test_a_restarted_queue_whose_broker_does_not_answer_keeps_its_offset() -> None:
    view = FakeView(max={A0: 40})
    observed = observe(view, {A0: 100}, [A0])
    view.silent.add("broker-a")  # gone between the two questions
    result = plan_batch(view, observed, rules(fail=False))
    assert result.ends == {A0: 100} and result.restarted == {} and A0 in view.unreachable


def test_the_read_limit_is_shared_by_the_queues_that_advance() -> None:
    view = FakeView(max={A0: 1000, A1: 110, A2: 40, A3: 60}, min={A2: 0})
    begin = {A0: 0, A1: 100, A2: 100}
    result = plan_batch(view, observe(view, begin, [A0, A1, A2, A3]), rules(fail=False, placed={A3: 0}, max_rows=101))
    assert result.ends[A2] == 0 and result.ends[A3] == 0  # restarted and placed: outside the limit
    assert (result.ends[A0] - 0) + (result.ends[A1] - 100) == 101
    assert result.ends[A0] == 100 and result.ends[A1] == 101  # shared by backlog, 1000 : 10


def test_available_now_reads_up_to_its_target_never_backwards() -> None:
    view = FakeView(max={A0: 100, A1: 100, A2: 100})
    target = {A0: 60, A1: 5}  # A1: the query is already past it
    assert plan(view, {A0: 10, A1: 20, A2: 30}, [A0, A1, A2], rules(target=target)) == {A0: 60, A1: 20, A2: 100}


def test_reachable_end() -> None:
    assert reachable_end(A0, 10, 50, None) == 50
    assert reachable_end(A0, 10, 50, {A0: 30}) == 30
    assert reachable_end(A0, 10, 50, {A0: 70}) == 50
    assert reachable_end(A0, 10, 50, {A0: 5}) == 10
    assert reachable_end(A0, 10, 50, {A1: 5}) == 50  # no target for the queue: what it holds


def test_observed_queues_that_moved_back_exclude_unanswered_and_new_ones() -> None:
    observed = Observed(begin={A0: 100, A1: 100}, latest={A0: 100, A2: 0})
    assert observed.moved_back == []
