"""`python -m bench soak` for a minute: nothing acknowledged is lost, resources stay bounded.

The soak runs in a process of its own (`soak_job.py`, with its own SparkSession), so it runs beside
the tests that share the run's session rather than after them. Timings are the bench's to report;
this test checks only what must hold whatever the machine's speed: every acknowledged message read
by each reader, no duplicate in the Parquet output, retention deleting segments, the broker's open
files and threads after its restart no more than before it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark.child_jobs import run_child

SOAK_S = 60  # with Spark's start, the catch-up at the end and the checks, about 75 s (retention: 30 s)
JOB = Path(__file__).with_name("soak_job.py")
DEADLINE_S = SOAK_S + 300  # the bench's catch-up deadline (120 s) and more
pytestmark = [pytest.mark.slow, pytest.mark.timeout(DEADLINE_S + 60)]

FD_MARGIN = 16  # connections and files that come and go between two samples
THREAD_MARGIN = 4


def test_a_minute_of_soak_loses_nothing_and_stays_bounded(tmp_path: Path) -> None:
    result = run_child(JOB, [str(SOAK_S), str(tmp_path)], tmp_path / "soak.log", DEADLINE_S)
    samples, checks, summary = result["samples"], result["checks"], result["summary"]
    assert summary["acknowledged"] > 0
    for check in checks:
        assert check["lost"] == 0, check
    (spark_check,) = [c for c in checks if c["name"].startswith("Spark")]
    assert spark_check["duplicates"] == 0
    assert summary["segments_deleted_by_retention"] > 0
    assert result["topics_churned"] > 0
    before = [s for s in samples if s["broker_life"] == 1]
    after = [s for s in samples if s["broker_life"] == 2]
    assert before and after
    assert all(s["heap_in_use_mib"] > 0 and s["heap_free_mib"] >= 0 for s in samples), samples
    assert max(s["open_fds"] for s in after) <= max(s["open_fds"] for s in before) + FD_MARGIN
    assert max(s["threads"] for s in after) <= max(s["threads"] for s in before) + THREAD_MARGIN
