"""`python -m bench soak` for about two minutes: nothing acknowledged is lost, resources stay bounded.

Timings are the bench's to report; this test checks only what must hold whatever the machine's
speed: every acknowledged message read by each reader, no duplicate in the Parquet output, retention
deleting segments, the broker's open files and threads after its restart no more than before it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.soak import SoakPlan, run

SOAK_S = 100  # with the catch-up at the end and the checks, about two minutes
pytestmark = [pytest.mark.slow, pytest.mark.timeout(SOAK_S + 300)]  # the bench's catch-up deadline (120 s) and more

FD_MARGIN = 16  # connections and files that come and go between two samples
THREAD_MARGIN = 4


async def test_two_minute_soak_loses_nothing_and_stays_bounded(spark: SparkSession, tmp_path: Path) -> None:
    plan = SoakPlan.for_seconds(SOAK_S, interval_s=12.5, segment_bytes=128 * 1024, retention_s=30)
    result = await run(plan, spark, tmp_path)
    samples, checks, summary = result["samples"], result["checks"], result["summary"]
    assert summary["acknowledged"] > 0
    for check in checks:
        assert check.lost == 0, check
    (spark_check,) = [c for c in checks if c.name.startswith("Spark")]
    assert spark_check.duplicates == 0
    assert summary["segments_deleted_by_retention"] > 0
    assert result["topics_churned"] > 0
    before = [s for s in samples if s.broker_life == 1]
    after = [s for s in samples if s.broker_life == 2]
    assert before and after
    assert max(s.open_fds for s in after) <= max(s.open_fds for s in before) + FD_MARGIN
    assert max(s.threads for s in after) <= max(s.threads for s in before) + THREAD_MARGIN
