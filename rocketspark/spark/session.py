"""A local SparkSession set up the way rocketspark's notebooks, jobs, benchmarks and tests need it."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_session(app_name: str, *, master: str = "local[*]", **conf: str) -> SparkSession:
    """A SparkSession on this machine.

    Python workers run this interpreter (otherwise Spark starts the system `python3`, which may lack
    pyarrow, and fails only after a long timeout), Spark binds to the loopback address, the UI is
    off and session times are UTC. `conf` adds or overrides Spark settings.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession  # noqa: PLC0415 - starting Spark is the caller's choice, not an import's

    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.bindAddress": os.environ["SPARK_LOCAL_IP"],
        **conf,
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
