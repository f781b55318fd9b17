"""The source and the sink on a Spark cluster: two executor JVMs with their own Python workers.

`local-cluster[2,1,1024]` starts a standalone master, a worker and two executor JVMs on this machine,
so readers, writers, options and partitions are pickled on the driver and run in other processes,
as on a standalone, YARN or Kubernetes cluster. A process holds one SparkContext, so the job runs in
a subprocess (tests/spark/cluster_job.py); the test pulls the result back from the brokers.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from rocketspark.client.api import admin
from rocketspark.message.message import MessageExt
from rocketspark.remoting.client import RemotingClient
from tests.integration.broker_client import pull_all
from tests.spark.child_jobs import run_child
from tests.spark.cluster import SparkCluster

JOB = Path(__file__).with_name("cluster_job.py")
JOB_TIMEOUT_S = 360
MESSAGES = 1_000


async def stored_messages(brokers: list[str], topic: str) -> list[MessageExt]:
    """Every message of `topic` on `brokers`, pulled queue by queue (the test needs no SparkSession
    of its own, so it runs beside the Spark tests rather than after them)."""
    client = RemotingClient()
    try:
        configs = [await admin.get_all_topic_config(client, broker) for broker in brokers]
        return [
            message
            for broker, config in zip(brokers, configs, strict=True)
            for queue_id in range(config.topic_config_table[topic].write_queue_nums)
            for message in await pull_all(client, broker, topic, queue_id)
        ]
    finally:
        await client.close()


def wait_gone(pids: set[int], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while alive := {pid for pid in pids if Path(f"/proc/{pid}").exists()}:
        assert time.monotonic() < deadline, f"processes of the cluster job still run: {sorted(alive)}"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.timeout(JOB_TIMEOUT_S + 120)
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="connections are traced through Linux's /proc")
def test_stream_from_topic_to_topic_on_two_executors(two_brokers: SparkCluster, tmp_path: Path) -> None:
    two_brokers.create_topic("ClusterIn")
    two_brokers.create_topic("ClusterOut")
    sent = two_brokers.produce("ClusterIn", MESSAGES)
    namesrv = two_brokers.namesrv_addr
    brokers = [broker.address for broker in two_brokers.brokers.values()]

    result = run_child(
        JOB,
        [namesrv, "ClusterIn", "ClusterOut", "cluster_test", str(tmp_path / "checkpoint"), namesrv, *brokers],
        tmp_path / "cluster_job.log",
        JOB_TIMEOUT_S,
    )
    # the executors' Python workers ended with the job
    wait_gone({c["pid"] for c in result["connections"] if c["owner"] in ("0", "1")})
    assert result["inputRows"] == result["outputRows"] == MESSAGES

    out = asyncio.run(stored_messages(brokers, "ClusterOut"))
    # every input row arrived exactly once, with its tag, key and user property
    assert Counter(m.body.decode() for m in out) == Counter(row[7].decode() for row in sent)
    expected = {row[7].decode(): (row[5], row[6], str(i)) for i, row in enumerate(sent)}
    assert all((m.tags, m.keys, m.properties.get("seq")) == expected[m.body.decode()] for m in out)

    # each message was sent on a connection held by a Python worker of an executor JVM, not the driver,
    # and both executors wrote: the broker stores the sender's address as the message's bornHost
    # (the job samples the connections while it runs; an address that served two processes in turn,
    # a closed worker connection's port taken again, leaves its messages unattributed)
    owners = {local: seen[0] for local, seen in result["ownersSeen"].items() if len(seen) == 1}
    senders = Counter(owners.get(m.born_host, "unknown") for m in out)
    assert senders["0"] and senders["1"] and not senders["driver"], senders
    # each executor's Python workers opened clients of their own (name server, brokers); the driver's
    # processes asked the name server for routes and every broker for offsets
    final = {c["owner"] for c in result["connections"]}
    reached = {owner: {c["remote"] for c in result["connections"] if c["owner"] == owner} for owner in final}
    for executor in ("0", "1"):
        assert namesrv in reached[executor], reached
        assert reached[executor] & set(brokers), reached
    assert reached["0"] | reached["1"] == {namesrv, *brokers}, reached
    assert reached["driver"] == {namesrv, *brokers}, reached
