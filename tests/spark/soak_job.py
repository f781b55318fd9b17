"""The soak of `tests/spark/test_soak.py`, in a process of its own: `soak_job.py SECONDS WORK_DIR`.

Runs `bench.soak.run` with a local[2] SparkSession of this process (the soak's Spark stream and its
Parquet check), small segments and a short retention so retention deletes segments within the run,
and prints the samples, reader checks and summary as one `RESULT <json>` line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from pathlib import Path

from bench.soak import SoakPlan, run
from rocketspark.spark.session import local_session


def main(seconds: float, work_dir: Path) -> None:
    spark = local_session("rocketspark-soak-test", master="local[2]", **{"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        plan = SoakPlan.for_seconds(seconds, interval_s=seconds / 8, segment_bytes=128 * 1024, retention_s=30)
        result = asyncio.run(run(plan, spark, work_dir))
    finally:
        spark.stop()
    result["samples"] = [dataclasses.asdict(s) for s in result["samples"]]
    result["checks"] = [dataclasses.asdict(c) for c in result["checks"]]
    print("RESULT " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main(float(sys.argv[1]), Path(sys.argv[2]))
