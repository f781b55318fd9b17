"""Rows of a Spark batch split by destination (queue and delay level), without Spark or a broker."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.sink.options import parse_sink
from rocketspark.spark.sink.rows import RowPlace, split_batch

QUEUES = [MessageQueue("T", "broker-a", q) for q in range(4)]


def test_rows_go_to_their_queue_and_level_in_order() -> None:
    rng = np.random.default_rng(3)
    n = 5_000
    queue_ids = rng.integers(0, 4, n)
    levels = rng.integers(0, 3, n)
    batch = pa.record_batch(
        {
            "body": pa.array([str(i).encode() for i in range(n)]),
            "queueId": pa.array(queue_ids, pa.int32()),
            "delayLevel": pa.array(levels, pa.int32()),
        }
    )
    options = parse_sink({"nameserver": "127.0.0.1:9876", "topic": "T", "batchSize": "700"})
    outgoing = split_batch(batch, options, RowPlace(None, 0), lambda topic: QUEUES, 1024)
    got: dict[tuple[int, int], list[int]] = {}
    for item in outgoing:
        assert item.queue is not None
        got.setdefault((item.queue.queue_id, item.delay_level), []).extend(
            int(body) for body in item.batch.column("body").to_pylist()
        )
        assert item.batch.num_rows <= 700
    expected = {
        (q, level): np.flatnonzero((queue_ids == q) & (levels == level)).tolist()
        for q in range(4)
        for level in range(3)
    }
    assert got == expected
    assert list(got) == sorted(got)  # destinations in ascending order, each one's rows in the rows' order


def test_one_destination_sends_the_rows_as_they_are() -> None:
    batch = pa.record_batch({"body": pa.array([b"a", b"b", b"c"])})
    options = parse_sink({"nameserver": "127.0.0.1:9876", "topic": "T"})
    (item,) = split_batch(batch, options, RowPlace(None, 0), lambda topic: QUEUES, 1024)
    assert item.queue is None  # round robin
    assert item.batch.column("body").to_pylist() == [b"a", b"b", b"c"]
