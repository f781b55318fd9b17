"""The transactional sink's driver commit (rocketspark.spark.sink.transactional.commit) against a
`flavor=apache` broker, which stores every END it gets: a commit finished after its driver died among
its ENDs, a replayed committed batch, and a commit whose driver is gone finished by a check, store
each row once; a check of a committed batch's half message (a copy Apache wrote back) is answered
ROLLBACK. No Spark: the commit runs as the driver's
Python worker runs it, from the tasks' half messages."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from pathlib import Path

from rocketspark.client.api import admin
from rocketspark.client.api.offset import get_max_offset
from rocketspark.client.producer.transaction import HalfMessage, TransactionStatus
from rocketspark.message.message import Message
from rocketspark.message.validation import TRANS_HALF_TOPIC
from rocketspark.processes import wait_registered
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.client import RemotingClient
from rocketspark.spark import cluster as spark_cluster
from rocketspark.spark.sink.options import SinkOptions, parse_sink
from rocketspark.spark.sink.transactional.commit import commit_batch
from rocketspark.spark.sink.transactional.ending import end_halves
from rocketspark.spark.sink.transactional.finishing import ORPHAN_COMMIT_AGE_S
from rocketspark.spark.sink.transactional.listener import producer_for
from rocketspark.spark.sink.transactional.record import (
    ATTEMPT_PROPERTY,
    RECORD_PROPERTY,
    BatchRecord,
    HalfRange,
    RecordState,
    load,
    locked,
    save,
)
from rocketspark.spark.sink.transactional.sending import TaskHalves
from rocketspark.spark.sink.transactional.stored import queue_starts
from tests.integration.broker_client import pull_all
from tests.spark.queries import wait_for
from tests.transaction.conftest import Cluster

QUEUES = 2


def sink(cluster: Cluster, tmp_path: Path, topic: str) -> SinkOptions:
    return parse_sink(
        {
            "nameserver": cluster.namesrv.address,
            "topic": topic,
            "transactional": "true",
            "transactionLog": str(tmp_path / "log"),
            "producerGroup": f"{topic}_sink",
            "txnAppId": topic,
            "txnVersion": "1",
        }
    )


def create_topic(cluster: Cluster, topic: str) -> None:
    async def create() -> None:
        client = RemotingClient()
        try:
            await admin.create_topic(client, cluster.broker.address, TopicConfig(topic, QUEUES, QUEUES))
        finally:
            await client.close()

    asyncio.run(create())
    wait_registered(cluster.namesrv.address, cluster.broker.address, (topic,))


def visible(cluster: Cluster, topic: str) -> Counter[str]:
    async def pull() -> Counter[str]:
        client = RemotingClient()
        try:
            found: Counter[str] = Counter()
            for queue_id in range(QUEUES):
                found.update(m.body.decode() for m in await pull_all(client, cluster.broker.address, topic, queue_id))
            return found
        finally:
            await client.close()

    return asyncio.run(pull())


def send_task(options: SinkOptions, path: str, rows: int) -> tuple[TaskHalves, list[HalfMessage]]:
    """What a task sends: `rows` half messages, alternating between the queues; its commit message
    and the half messages."""
    assert options.topic is not None
    producer = producer_for(options)
    extra = {RECORD_PROPERTY: path, ATTEMPT_PROPERTY: "a1"}
    halves: list[HalfMessage] = []
    for i in range(rows):
        message = Message(options.topic, f"row {i}".encode(), properties=extra)
        queue = MessageQueue(options.topic, "broker-a", i % QUEUES)
        halves.append(spark_cluster.run(producer.send_half(message, queue=queue))[1])
    offsets = [half.queue_offset for half in halves]
    return TaskHalves("a1", path, rows, (HalfRange("a1", "broker-a", min(offsets), max(offsets), rows),)), halves


def test_a_commit_finished_after_its_driver_died_among_its_ends_stores_each_row_once(
    apache: Cluster, tmp_path: Path
) -> None:
    options = sink(apache, tmp_path, "ApFinish")
    create_topic(apache, "ApFinish")
    path = str(tmp_path / "log" / "txn-ApFinish-1.json")
    task, halves = send_task(options, path, 40)
    producer = producer_for(options)
    # the first driver: its record, then the ENDs of the first rows of each queue, then it died
    starts = spark_cluster.run(queue_starts(producer, [halves]))
    save(path, BatchRecord(RecordState.COMMITTING, frozenset({"a1"}), task.ranges, starts))
    spark_cluster.run(end_halves(producer, [halves[:14]], TransactionStatus.COMMIT))
    assert sum(visible(apache, "ApFinish").values()) == 14
    # the batch runs again (a new attempt's rows are rolled back); its commit finishes the first one's
    record = commit_batch(options, [task])
    assert record is not None and record.state is RecordState.COMMITTED
    assert visible(apache, "ApFinish") == Counter(f"row {i}" for i in range(40))
    # replayed once more: the record says committed, nothing is ended again
    commit_batch(options, [task])
    assert visible(apache, "ApFinish") == Counter(f"row {i}" for i in range(40))


def test_copies_checked_before_and_after_the_commit_store_no_row_twice(apache: Cluster, tmp_path: Path) -> None:
    """The batch stays open past transactionTimeOut: Apache's check writes its half messages back and
    asks about the copies (UNKNOWN: no record yet); after the commit the copies' checks are answered
    ROLLBACK, the driver's ENDs of the first half messages having stored every row."""
    options = sink(apache, tmp_path, "ApCopyCheck")
    create_topic(apache, "ApCopyCheck")
    path = str(tmp_path / "log" / "txn-ApCopyCheck-1.json")
    halves_before = half_messages(apache)
    task, _ = send_task(options, path, 6)
    wait_for(lambda: half_messages(apache) >= halves_before + 2 * 6, "copies of the open half messages", 20)
    commit_batch(options, [task])
    time.sleep(3)  # rounds enough for the copies written before the commit to be checked again
    assert visible(apache, "ApCopyCheck") == Counter(f"row {i}" for i in range(6))


def half_messages(cluster: Cluster) -> int:
    async def ask() -> int:
        client = RemotingClient()
        try:
            return await get_max_offset(client, cluster.broker.address, TRANS_HALF_TOPIC, 0)
        finally:
            await client.close()

    return asyncio.run(ask())


def test_a_check_finishes_a_commit_whose_driver_is_gone(apache: Cluster, tmp_path: Path) -> None:
    """The record says committing, its driver died after 14 ENDs and no driver runs the batch again:
    the brokers' checks of the open half messages (through copies) reach a producer of the group,
    which finishes the commit once the record is ORPHAN_COMMIT_AGE_S old and its lock is free."""
    options = sink(apache, tmp_path, "ApOrphan")
    create_topic(apache, "ApOrphan")
    path = str(tmp_path / "log" / "txn-ApOrphan-1.json")
    task, halves = send_task(options, path, 40)
    producer = producer_for(options)  # its listener answers the checks
    starts = spark_cluster.run(queue_starts(producer, [halves]))
    save(path, BatchRecord(RecordState.COMMITTING, frozenset({"a1"}), task.ranges, starts))
    spark_cluster.run(end_halves(producer, [halves[:14]], TransactionStatus.COMMIT))
    old = time.time() - ORPHAN_COMMIT_AGE_S - 1
    os.utime(path, (old, old))
    with locked(path):  # a driver still committing: the checks leave the commit to it
        time.sleep(3)
        assert sum(visible(apache, "ApOrphan").values()) == 14
    wait_for(lambda: sum(visible(apache, "ApOrphan").values()) >= 40, "the commit finished by a check", 30)
    time.sleep(2)  # later rounds: the copies' checks are answered ROLLBACK
    assert visible(apache, "ApOrphan") == Counter(f"row {i}" for i in range(40))
    record = load(path)
    assert record is not None and record.state is RecordState.COMMITTED
