"""The Spark source and sink against a broker with ACL on (one job in its own process, see
client_spark_job.py): with accessKey/secretKey a query reads and writes; unsigned or with a wrong
secret, reads and writes fail with AccessDeniedError naming the refusal; and the secret appears
nowhere in the driver's log, explain(), the last progress or the checkpoint directory."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.security.conftest import USER, AclBroker
from tests.security.test_client_acl import create_topic

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("client_spark_job.py")
WRONG_SECRET = "wrong-secret-789"


def test_spark_reads_and_writes_signed_and_keeps_the_secret(acl_broker: AclBroker, tmp_path: Path) -> None:
    source, sink = "SparkAclSource", "SparkAclSink"
    asyncio.run(create_topic(acl_broker, source))
    asyncio.run(create_topic(acl_broker, sink))
    checkpoint = tmp_path / "checkpoint"
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "ROCKETMQ_ACCESS_KEY": USER.access_key,
        "ROCKETMQ_SECRET_KEY": USER.secret_key,
        "WRONG_SECRET": WRONG_SECRET,
    }
    done = subprocess.run(
        [sys.executable, str(JOB), acl_broker.namesrv.address, source, sink, str(checkpoint)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-5000:]
    result = json.loads(done.stdout.rsplit("RESULT ", 1)[1])

    assert result["stream_error"] is None
    assert result["sink_rows"] == sorted(f"row-{i}" for i in range(20))
    assert result["last_progress"]["sources"][0]["numInputRows"] == 20

    assert "AccessDeniedError" in result["unsigned_read"]
    assert "carries no AccessKey" in result["unsigned_read"]
    for refused in (result["wrong_read"], result["wrong_stream"]):
        assert "AccessDeniedError" in refused
        assert f"signature does not match for access key {USER.access_key}" in refused
    assert "AccessDeniedError" in result["unsigned_write"]
    # the refusal names what the unsigned send needed
    assert (
        f"carries no AccessKey; this broker needs signed requests (needs PUB on topic {source})"
        in (result["unsigned_write"])
    )

    shown = [log, result["stream_explain"], result["batch_explain"], json.dumps(result["last_progress"])]
    checkpoint_files = [p for p in checkpoint.rglob("*") if p.is_file()]
    assert checkpoint_files  # offsets, commits, metadata
    shown += [p.read_bytes().decode("utf-8", "replace") for p in checkpoint_files]
    assert "INFO SparkContext" in log  # the log searched is Spark's verbose one
    for secret in (USER.secret_key, WRONG_SECRET):
        assert not [text for text in shown if secret in text], f"{secret} shown"
