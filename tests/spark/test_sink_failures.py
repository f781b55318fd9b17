"""A sink task that fails leaves nothing behind: the sends it still had in flight are cancelled and
awaited before the failure reaches Spark, so none of them reaches a broker afterwards.

The writer is called as Spark calls it on an executor (`write` with an iterator of Arrow batches),
in this process, against real brokers. broker-b, which holds the topic the task's sends wait on, is
stopped (SIGSTOP) while the task fails: its first send is then on the wire and the later ones wait
behind it (sends to one queue go one after another)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from rocketspark.client.sync import shared_loop
from rocketspark.spark.sink import writing
from rocketspark.spark.sink.options import parse_sink
from rocketspark.spark.sink.writers import RocketMQBatchWriter
from tests.harness import ServerFactory
from tests.spark.cluster import Brokers
from tests.spark.test_sink_brokers import stored_on

#: rows of each batch the task hands the writer
ROWS = 50
#: broker-a refuses bodies over this (the writer's own check allows 4 MiB)
SMALL_LIMIT = 1_024


def rows(topic: str, count: int, *, body_size: int = 16) -> pa.RecordBatch:
    """`count` rows for queue 0 of `topic`."""
    return pa.RecordBatch.from_pydict(
        {
            "body": [f"{topic} {i}".ljust(body_size, ".") for i in range(count)],
            "topic": [topic] * count,
            "queueId": pa.array([0] * count, pa.int32()),
        }
    )


def task_input(failure: str) -> Iterator[pa.RecordBatch]:
    """What Spark hands a task: with `failure="send"` first a batch broker-a refuses, then batches
    for broker-b's topic; with `failure="input"` those batches, then an error of the input (a UDF
    failing mid-partition, say)."""
    if failure == "send":
        yield rows("Refused", 1, body_size=2 * SMALL_LIMIT)
    for _ in range(4):
        yield rows("Waiting", ROWS)
    if failure == "input":
        raise RuntimeError("the task's input failed mid-partition")


def writing_tasks() -> set[asyncio.Task[object]]:
    """The tasks on the process's client loop that run the sink's writing code."""

    def runs_writing_code(task: asyncio.Task[object]) -> bool:
        frame = getattr(task.get_coro(), "cr_frame", None)
        return frame is not None and frame.f_globals.get("__name__") == writing.__name__

    async def listing() -> set[asyncio.Task[object]]:
        return {task for task in asyncio.all_tasks() if runs_writing_code(task)}

    return shared_loop().run(listing(), 10)


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["send", "input"])
def test_a_failed_task_leaves_no_send_running(servers: ServerFactory, tmp_path: Path, failure: str) -> None:
    """When write() raises, no send of the task runs any more; once broker-b resumes, it stores at
    most the request that was on the wire when the task failed, none of the three behind it."""
    brokers = Brokers(servers, tmp_path, "--set", f"maxMessageSize={SMALL_LIMIT}")
    cluster = brokers.cluster
    cluster.create_topic("Refused", queues=1, on=("broker-a",))
    cluster.create_topic("Waiting", queues=1, on=("broker-b",))
    options = parse_sink({"nameserver": cluster.namesrv_addr, "sendTimeoutMs": "60000"})
    writer = RocketMQBatchWriter(options)
    writer.write(iter([rows("Refused", 1), rows("Waiting", ROWS)]))  # the producer and its connections
    assert stored_on(cluster, "broker-b", "Waiting", 1) == ROWS
    threads = set(threading.enumerate())

    with brokers.b_frozen():
        expected = "maxMessageSize" if failure == "send" else "input failed mid-partition"
        with pytest.raises(Exception, match=expected):
            writer.write(task_input(failure))
        assert not writing_tasks(), "sends of the failed task are still running"
        assert set(threading.enumerate()) <= threads

    # a marker on the same queue, through the same producer and connection, once broker-b runs again:
    # a send the failed task left behind would reach broker-b before it, so once the marker is stored
    # (write returns when it is acknowledged) every such send has been stored too
    writer.write(iter([rows("Waiting", 1)]))
    assert stored_on(cluster, "broker-b", "Waiting", 1) - 1 <= ROWS + ROWS  # the first write's, one request's
    assert not writing_tasks()
