"""Transactional writes on a Spark cluster whose executors cannot read the driver's transaction log.

`local-cluster[2,1,1024]` (two executor JVMs with Python workers of their own); every executor Python
process runs in a mount namespace of its own where the log's directories are empty file systems
(tests/spark/txn_cluster_job.py), as executors on other hosts do not see the driver's local disk.
The brokers ask only the driver's producers about half messages (the executors' half messages name
the driver's group), and only the driver reads the records: a batch write and a streaming query
(its log in the default place, beside a `file:` URI checkpoint) write every row once into topics on
a default-flavor broker and a `flavor=apache` broker, and stray half messages of a dead attempt are
rolled back by the driver's answers to the checks.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from rocketspark.client.api import admin
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.spark.child_jobs import run_child
from tests.spark.cluster import SparkCluster
from tests.spark.test_sink_cluster import stored_messages
from tests.spark.txn_cluster_job import BATCH_ROWS, HIDDEN_DIR

JOB = Path(__file__).with_name("txn_cluster_job.py")
JOB_TIMEOUT_S = 360
SOURCE_ROWS = 3_000
#: checks every 0.5 s of half messages older than 1 s, without end (no half message is discarded)
CHECKS = ("transactionTimeOut=1000", "transactionCheckInterval=500", "transactionCheckMax=100000")


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--mount", "sh", "-c", "mount -t tmpfs tmpfs /mnt"], capture_output=True, timeout=30, check=False
    )
    return probe.returncode == 0


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """broker-a of the default flavor and broker-b of flavor=apache, checking every half second."""
    factory = ServerFactory(tmp_path_factory.mktemp("txn-cluster"))
    settings = [arg for setting in CHECKS for arg in ("--set", setting)]
    try:
        namesrv = factory.namesrv()
        brokers = {
            "broker-a": factory.broker(namesrv.address, *settings, "--set", "duplicateWindowSeconds=0"),
            "broker-b": factory.broker(namesrv.address, *settings, "--set", "flavor=apache", broker_name="broker-b"),
        }
        yield SparkCluster(namesrv, brokers)
    finally:
        factory.stop_all()


def wrapper(directory: Path) -> Path:
    """PYSPARK_PYTHON for the job: in an executor (HIDDEN_DIR set), this interpreter in a mount
    namespace of its own where each directory HIDDEN_DIR names is an empty tmpfs."""
    script = directory / "python-hiding-the-log"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ -n "${HIDDEN_DIR}" ]; then\n'
        "  exec unshare --mount /bin/sh -c '"
        f'IFS=:; for d in ${HIDDEN_DIR}; do mount -t tmpfs tmpfs "$d" || exit 97; done; exec "$@"'
        f'\' sh {sys.executable} "$@"\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    script.chmod(0o755)
    return script


def waiting_halves(cluster: SparkCluster, broker: str) -> int:
    async def ask() -> int:
        client = RemotingClient()
        try:
            info = await admin.get_runtime_info(client, cluster.brokers[broker].address)
            return sum(orjson.loads(info["transactionHalfMessages"]).values())
        finally:
            await client.close()

    return asyncio.run(ask())


@pytest.mark.slow
@pytest.mark.timeout(JOB_TIMEOUT_S + 120)
@pytest.mark.skipif(not _unshare_works(), reason="hiding the log from the executors needs `unshare --mount` (root)")
def test_executors_that_cannot_read_the_log_write_every_row_once(mixed: SparkCluster, tmp_path: Path) -> None:
    for topic in ("TxClusterIn", "TxClusterBatch", "TxClusterStream"):
        mixed.create_topic(topic)
    sent = mixed.produce("TxClusterIn", SOURCE_ROWS, batched=True)
    namesrv = mixed.namesrv_addr
    broker_a = mixed.brokers["broker-a"].address
    topics = ["TxClusterIn", "TxClusterBatch", "TxClusterStream"]
    args = [namesrv, broker_a, *topics, str(tmp_path / "job"), str(wrapper(tmp_path))]
    result = run_child(JOB, args, tmp_path / "txn_cluster_job.log", JOB_TIMEOUT_S)

    # the executors' Python processes never saw a record: their log directories were empty
    assert result["executorPythons"] and not any(p["sharesDriverMounts"] for p in result["executorPythons"])
    assert all(not names for seen in result["executorsSaw"] for names in seen.values()), result["executorsSaw"]
    assert all(result["driverSaw"].values()), result["driverSaw"]  # the driver's records are there

    brokers = [broker.address for broker in mixed.brokers.values()]
    batch = Counter(m.body.decode() for m in asyncio.run(stored_messages(brokers, "TxClusterBatch")))
    assert batch == Counter(f"row {i}" for i in range(BATCH_ROWS))  # once each, no stray one
    stream = asyncio.run(stored_messages(brokers, "TxClusterStream"))
    assert Counter(m.body for m in stream) == Counter(row[7] for row in sent)
    assert result["streamRows"] == SOURCE_ROWS and result["streamBatches"] >= 3
    assert {m.properties.get("REAL_TOPIC") for m in stream} == {None}
    for broker in brokers:  # both flavors took part: half batches to broker-a, half messages one by one to broker-b
        assert asyncio.run(stored_messages([broker], "TxClusterStream")), broker
    # the dead attempt's half messages (on broker-a) were checked and rolled back while the job ran:
    # the driver answered (no producer of the group is left once the job ended)
    assert result["straysLeft"] == 0
    assert waiting_halves(mixed, "broker-a") == 0
