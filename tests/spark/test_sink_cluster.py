"""The source and the sink on a Spark cluster: two executor JVMs with their own Python workers.

`local-cluster[2,1,1024]` starts a standalone master, a worker and two executor JVMs on this machine,
so readers, writers, options and partitions are pickled on the driver and run in other processes,
as on a standalone, YARN or Kubernetes cluster. A process holds one SparkContext, so the job runs in
a subprocess (tests/spark/cluster_job.py) beside the tests' shared local[2] session, which reads the
result back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from tests.spark.cluster import SparkCluster

JOB = Path(__file__).with_name("cluster_job.py")
JOB_TIMEOUT_S = 360
MESSAGES = 1_000


def run_job(args: list[str], log: Path) -> dict:
    """Run cluster_job.py in its own process group; kill the group (executor JVMs too) on timeout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(JOB), *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
            start_new_session=True,
        )
        try:
            stdout, _ = process.communicate(timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stdout = ""
        finally:
            # whatever of the job is left: its driver JVM and the executor JVMs it started (their Python
            # daemons end when their JVM does)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate(timeout=30)
    tail = "\n".join(log.read_text().splitlines()[-40:])
    assert process.returncode == 0, f"the cluster job failed ({process.returncode}):\n{tail}"
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the cluster job printed no result:\n{stdout}\n{tail}"
    return json.loads(lines[-1].removeprefix("RESULT "))


def wait_gone(pids: set[int], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while alive := {pid for pid in pids if Path(f"/proc/{pid}").exists()}:
        assert time.monotonic() < deadline, f"processes of the cluster job still run: {sorted(alive)}"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.timeout(JOB_TIMEOUT_S + 120)
@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="connections are traced through Linux's /proc")
def test_stream_from_topic_to_topic_on_two_executors(
    spark: SparkSession, two_brokers: SparkCluster, tmp_path: Path
) -> None:
    two_brokers.create_topic("ClusterIn")
    two_brokers.create_topic("ClusterOut")
    sent = two_brokers.produce("ClusterIn", MESSAGES)
    namesrv = two_brokers.namesrv_addr
    brokers = [broker.address for broker in two_brokers.brokers.values()]

    result = run_job(
        [namesrv, "ClusterIn", "ClusterOut", "cluster_test", str(tmp_path / "checkpoint"), namesrv, *brokers],
        tmp_path / "cluster_job.log",
    )
    # the executors' Python workers ended with the job
    wait_gone({c["pid"] for c in result["connections"] if c["owner"] in ("0", "1")})
    assert result["inputRows"] == result["outputRows"] == MESSAGES

    out = (
        spark.read.format("rocketmq")
        .option("nameserver", namesrv)
        .option("topic", "ClusterOut")
        .load()
        .select(F.col("body").cast("string").alias("body"), "tags", "keys", "properties", "bornHost")
        .collect()
    )
    # every input row arrived exactly once, with its tag, key and user property
    assert Counter(r.body for r in out) == Counter(row[7].decode() for row in sent)
    expected = {row[7].decode(): (row[5], row[6], str(i)) for i, row in enumerate(sent)}
    assert all((r.tags, r.keys, r.properties.get("seq")) == expected[r.body] for r in out)

    # each message was sent on a connection held by a Python worker of an executor JVM, not the driver,
    # and both executors wrote: the broker stores the sender's address as the message's bornHost
    # (a worker that has exited by the time connections are listed leaves its messages unattributed)
    owners = {c["local"]: c["owner"] for c in result["connections"]}
    senders = Counter(owners.get(r.bornHost, "unknown") for r in out)
    assert senders["0"] and senders["1"] and not senders["driver"], senders
    # each executor's Python workers opened clients of their own (name server, brokers); the driver's
    # processes asked the name server for routes and every broker for offsets
    reached = {owner: {c["remote"] for c in result["connections"] if c["owner"] == owner} for owner in owners.values()}
    for executor in ("0", "1"):
        assert namesrv in reached[executor], reached
        assert reached[executor] & set(brokers), reached
    assert reached["0"] | reached["1"] == {namesrv, *brokers}, reached
    assert reached["driver"] == {namesrv, *brokers}, reached
