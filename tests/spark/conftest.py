from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from rocketspark.spark.session import local_session
from tests.harness import ServerFactory
from tests.spark.cluster import Brokers, SparkCluster, two_brokers_on


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One SparkSession for the whole run (local[2]); Python workers run this interpreter."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = local_session("rocketspark-tests", master="local[2]", **{"spark.sql.shuffle.partitions": "2"})
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def two_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A name server with brokers broker-a and broker-b, shared by a module's tests (distinct topics)."""
    factory = ServerFactory(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield two_brokers_on(factory)
    finally:
        factory.stop_all()


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return tmp_path / "checkpoint"


@pytest.fixture
def brokers(servers: ServerFactory, tmp_path: Path) -> Brokers:
    """broker-a and broker-b of a name server of the test's own; broker-b can crash and come back."""
    return Brokers(servers, tmp_path)
