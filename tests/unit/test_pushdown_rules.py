"""Which filters a batch read takes over and how they cut the planned ranges: no Spark, no servers."""

from __future__ import annotations

import datetime as dt
from importlib.machinery import ModuleSpec

import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
)

from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.options import parse
from rocketspark.spark.source import batch_reader as batch_reader_module
from rocketspark.spark.source.batch_reader import PUSHDOWN_WORKER, RocketMQPushdownReader, batch_reader
from rocketspark.spark.source.pushdown import Bounds, Pushed, narrow, push

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
T0_US = 1_767_225_600_000_000
A0, A1, B0 = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1), MessageQueue("T", "broker-b", 0)


def test_supported_filters_are_taken_and_the_others_left_to_spark() -> None:
    unsupported = [
        Not(EqualTo(("tags",), "A")),
        StringContains(("keys",), "x"),
        IsNotNull(("tags",)),
        EqualTo(("queueId",), "1"),  # not an int
        GreaterThan(("bornTimestamp",), T0),
        EqualTo(("brokerName",), "broker-a"),
    ]
    supported = [
        GreaterThanOrEqual(("storeTimestamp",), T0),
        LessThan(("storeTimestamp",), T0 + dt.timedelta(seconds=1)),
        In(("queueId",), (0, 1, None)),
        EqualTo(("queueId",), 1),
        GreaterThan(("queueOffset",), 9),
        LessThanOrEqual(("queueOffset",), 20),
        In(("tags",), ("A", "B")),
    ]
    pushed, left = push([*supported, *unsupported])
    assert left == unsupported
    assert pushed.taken == tuple(supported)
    assert pushed.store_time_us == Bounds(T0_US, T0_US + 1_000_000)
    assert pushed.store_time_ms == Bounds(T0_US // 1000, T0_US // 1000 + 1000)
    assert pushed.queue_ids == frozenset({1}) and pushed.offsets == Bounds(10, 21)
    assert pushed.tag_expression("*") == "A || B"
    assert pushed.tag_expression("B || C") == "B"
    assert pushed.tag_expression("C") is None


def test_time_bounds_in_whole_ms_keep_exactly_the_rows_spark_would() -> None:
    just_after = T0 + dt.timedelta(microseconds=1)
    assert push([GreaterThan(("storeTimestamp",), T0)])[0].store_time_ms.low == T0_US // 1000 + 1
    assert push([GreaterThanOrEqual(("storeTimestamp",), just_after)])[0].store_time_ms.low == T0_US // 1000 + 1
    assert push([LessThanOrEqual(("storeTimestamp",), T0)])[0].store_time_ms.high == T0_US // 1000 + 1
    assert push([LessThan(("storeTimestamp",), just_after)])[0].store_time_ms.high == T0_US // 1000 + 1
    naive = push([GreaterThanOrEqual(("storeTimestamp",), T0.replace(tzinfo=None))])[0]
    assert naive.store_time_us.low == T0_US  # a timestamp without a zone is UTC


def test_ranges_cut_to_queues_offsets_and_times() -> None:
    start = {A0: 0, A1: 5, B0: 0}
    end = {A0: 100, A1: 50, B0: 100}
    pushed = Pushed(offsets=Bounds(10, 60), queue_ids=frozenset({0}))
    by_time = {A0: (20, 80), B0: (70, 90)}
    assert narrow(start, end, pushed, by_time) == ({A0: 20, B0: 70}, {A0: 60, B0: 70})  # B0: empty
    assert narrow(start, end, Pushed(), {A0: (20, 80)})[1][A0] == 81  # the entry found for the high bound too
    assert narrow(start, end, Pushed(), {}) == (start, end)


def test_tag_values_the_broker_would_read_as_an_expression_stay_with_spark() -> None:
    """`*` subscribes to everything, `''` and `' A'` are trimmed, `A || B` names two tags: pushed as
    a tag filter, each would read other rows than `tags = value`, so Spark checks them."""
    for value in ("*", "", " A", "A ", "A || B", "A||B", "A|B"):
        equal, among = EqualTo(("tags",), value), In(("tags",), ("C", value))
        pushed, left = push([equal, among])
        assert left == [equal, among], value
        assert pushed.tags is None and pushed.tag_expression("*") == "*"
    assert push([In(("tags",), ("A", "B"))])[1] == []


def apache_search(times: list[int], timestamp: int) -> int:
    """What an Apache RocketMQ 4.x broker answers SEARCH_OFFSET_BY_TIMESTAMP with for a queue whose
    message at offset i was stored at times[i]: a binary search that returns any entry of the
    exact ms, else the nearer of the two entries around it (the last entry past the newest)."""
    low, high, left, right = 0, len(times) - 1, -1, -1
    while low <= high:
        mid = (low + high) // 2
        if times[mid] == timestamp:
            return mid
        if times[mid] > timestamp:
            high, right = mid - 1, mid
        else:
            low, left = mid + 1, mid
    if left == -1 or right == -1:
        return right if left == -1 else left
    return right if abs(timestamp - times[left]) > abs(timestamp - times[right]) else left


@pytest.mark.parametrize(
    "times",
    [
        [1000] * 5 + [1001] * 7 + [1003, 1010, 1010, 1010, 1012],  # many messages of one ms
        [1000, 1400, 1900, 1300, 1350, 2000, 1700, 2100, 2100],  # a clock that stepped back (< 1 s)
    ],
)
def test_time_cut_keeps_every_matching_row_against_nearest_entry_lookups(times: list[int]) -> None:
    """Every row whose store time a pushed filter keeps lies in the range planned from the offsets
    an Apache broker finds (nearest entry, the last entry past the newest), for every bound."""
    edges = sorted({e for t in times for e in (t - 1, t, t + 1)} | {min(times) - 1500, max(times) + 1500})
    for low in edges:
        for high in (h for h in edges if h > low):
            pushed = Pushed(store_time_us=Bounds(low * 1000, high * 1000))
            lookups = pushed.time_lookups_ms
            assert lookups.low is not None and lookups.high is not None
            found = (apache_search(times, lookups.low), apache_search(times, lookups.high))
            start, end = narrow({A0: 0}, {A0: len(times)}, pushed, {A0: found})
            wanted = [i for i, t in enumerate(times) if low <= t < high]
            assert all(start[A0] <= i < end[A0] for i in wanted), (low, high, start, end)


def reader_in_pushdown_worker(name: str) -> object:
    """The reader `batch_reader` hands out when PySpark's pushdown worker (run as `name`) asks."""
    options = parse({"nameserver": "h:1", "topic": "T"}, streaming=False)
    worker = {"__name__": name, "__spec__": ModuleSpec(PUSHDOWN_WORKER, None), "batch_reader": batch_reader}
    exec("reader = batch_reader(options)", worker, scope := {"options": options})
    return scope["reader"]


@pytest.mark.parametrize("name", [PUSHDOWN_WORKER, "__main__"])
def test_the_reader_follows_pyspark_s_pushdown_worker_also_when_it_runs_as_main(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With spark.python.use.daemon=false PySpark runs its worker as `python -m <module>`: its
    `__name__` is `__main__` and only its `__spec__` names the module. (As on a PySpark that keeps a
    pushed read in its scan.)"""
    monkeypatch.setattr(batch_reader_module, "SCAN_SCOPED_PUSHDOWN", True)
    assert isinstance(reader_in_pushdown_worker(name), RocketMQPushdownReader)
    options = parse({"nameserver": "h:1", "topic": "T"}, streaming=False)
    assert not isinstance(batch_reader(options), RocketMQPushdownReader)  # planned without pushdown


def test_no_filter_is_taken_where_spark_shares_a_pushed_read_between_scans(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """PySpark 4.x hands the read one scan pushed to every later scan of the DataFrame: the reader
    its pushdown worker gets then has the base `pushFilters`, which gives every filter back, and
    the worker logs why once."""
    monkeypatch.setattr(batch_reader_module, "SCAN_SCOPED_PUSHDOWN", False)
    batch_reader_module._warn_pushdown_off.cache_clear()
    with caplog.at_level("WARNING", logger=batch_reader_module.__name__):
        readers = [reader_in_pushdown_worker(PUSHDOWN_WORKER) for _ in range(2)]
    assert not any(isinstance(reader, RocketMQPushdownReader) for reader in readers)
    filters = [EqualTo(("queueId",), 1)]
    assert all(list(reader.pushFilters(filters)) == filters for reader in readers)  # type: ignore[attr-defined]
    assert [r.getMessage().count("SPARK-58551") for r in caplog.records] == [1]
