"""The Spark source and sink over TLS, with ACL on: the LAN set-up of docs/operations.md."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rocketspark.errors import ConfigError
from rocketspark.spark.options import parse
from tests.harness import ServerFactory
from tests.spark.conftest import spark  # noqa: F401 - the session's one SparkSession
from tests.tls.certs import Certificates
from tests.tls.conftest import start_tls_cluster

ACCOUNTS = """
accounts:
  - accessKey: spark-jobs
    secretKey: spark-secret-123
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


def test_tls_options_are_checked(certs: Certificates, tmp_path: Path) -> None:
    base = {"nameserver": "127.0.0.1:9876", "topic": "T"}
    assert parse({**base, "useTLS": "true", "tlsTrust": str(certs.ca)}, streaming=False).use_tls
    assert not parse(base, streaming=False).use_tls
    with pytest.raises(ConfigError, match="tlsTrust needs useTLS=true"):
        parse({**base, "tlsTrust": str(certs.ca)}, streaming=False)
    with pytest.raises(ConfigError, match="does not exist"):
        parse({**base, "useTLS": "true", "tlsTrust": str(tmp_path / "missing.pem")}, streaming=False)


@pytest.mark.slow
def test_spark_writes_and_reads_over_tls_with_acl(
    spark: SparkSession,  # noqa: F811
    servers: ServerFactory,
    certs: Certificates,
    tmp_path: Path,
) -> None:
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(ACCOUNTS)
    cluster = start_tls_cluster(servers, certs, aclEnable="true", plainAclFile=accounts)
    options = {
        "nameserver": cluster.namesrv.address,
        "useTLS": "true",
        "tlsTrust": str(certs.ca),
        "accessKey": "spark-jobs",
        "secretKey": "spark-secret-123",
        "topic": "SparkTls",
    }
    rows = spark.range(200).select(F.format_string("row %d", "id").alias("body"))
    rows.write.format("rocketmq").options(**options).mode("append").save()
    read = spark.read.format("rocketmq").options(**options).load()
    assert sorted(r.body.decode() for r in read.select("body").collect()) == sorted(f"row {i}" for i in range(200))
