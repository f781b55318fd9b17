"""A transactional batch of many rows: what its task sends the driver (the commit message) and what
the batch record keeps stay the same size whatever the rows, and the batch commits every row. No
Spark: the task and the commit run as an executor's and the driver's Python workers run them."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from rocketspark.client.api import admin
from rocketspark.client.api.offset import get_max_offset
from rocketspark.processes import ServerProcess, wait_registered
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from rocketspark.spark.sink.options import SinkOptions, parse_sink
from rocketspark.spark.sink.transactional.commit import commit_batch
from rocketspark.spark.sink.transactional.sending import TaskHalves, send_task
from rocketspark.spark.sink.transactional.writers import TransactionalCommitMessage
from tests.harness import ServerFactory

QUEUES = 4
ROWS_PER_BATCH = 10_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """A name server and a broker with the duplicate window off (no guarantee rests on it)."""
    factory = ServerFactory(tmp_path_factory.mktemp("large-transactions"))
    try:
        namesrv = factory.namesrv()
        yield namesrv, factory.broker(namesrv.address, "--set", "duplicateWindowSeconds=0")
    finally:
        factory.stop_all()


def _create_topic(namesrv: ServerProcess, broker: ServerProcess, topic: str) -> None:
    async def create() -> None:
        client = RemotingClient()
        try:
            await admin.create_topic(client, broker.address, TopicConfig(topic, QUEUES, QUEUES))
        finally:
            await client.close()

    asyncio.run(create())
    wait_registered(namesrv.address, broker.address, (topic,))


def _stored(broker: ServerProcess, topic: str) -> int:
    async def count() -> int:
        client = RemotingClient()
        try:
            return sum([await get_max_offset(client, broker.address, topic, q) for q in range(QUEUES)])
        finally:
            await client.close()

    return asyncio.run(count())


def _rows(count: int) -> Iterator[pa.RecordBatch]:
    for start in range(0, count, ROWS_PER_BATCH):
        bodies = [f"row {i}".encode() for i in range(start, min(count, start + ROWS_PER_BATCH))]
        yield pa.RecordBatch.from_pydict({"body": pa.array(bodies, pa.binary())})


def _write(options: SinkOptions, log: Path, name: str, rows: int) -> TaskHalves:
    """One task of `rows` rows, committed; its commit message."""
    task = send_task(options, iter(_rows(rows)), 0, None, str(log / f"txn-{name}.json"))
    committed = commit_batch(options, [task])
    assert committed is not None and committed.ranges == task.ranges
    return task


@pytest.mark.slow
def test_a_batch_of_200_000_rows_commits_with_a_commit_message_of_a_few_hundred_bytes(
    broker: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    namesrv, server = broker
    _create_topic(namesrv, server, "TxnLarge")
    settings = {"nameserver": namesrv.address, "topic": "TxnLarge", "transactional": "true"}
    options = parse_sink({**settings, "transactionLog": str(tmp_path), "transactionMaxOpenSeconds": "900"})
    small = _write(options, tmp_path, "small", 2_000)
    large = _write(options, tmp_path, "large", 200_000)
    assert (small.rows, large.rows) == (2_000, 200_000)
    assert _stored(server, "TxnLarge") == 202_000  # every row of both, once
    sizes = [len(pickle.dumps(TransactionalCommitMessage(task))) for task in (small, large)]
    assert sizes[1] <= sizes[0] + 16 and sizes[1] < 1_024, sizes  # what Spark collects: O(brokers)
    records = [(tmp_path / f"txn-{name}.json").stat().st_size for name in ("small", "large")]
    assert records[1] <= records[0] + 16 and records[1] < 1_024, records
