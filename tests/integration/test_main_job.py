"""The main job (the demo), run the way the README runs it: `python -m jobs.main`, with few events."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVENTS = 5_000


@pytest.mark.slow  # Spark in a process of its own
def test_main_job_runs_the_demo() -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", COLUMNS="160")
    result = subprocess.run(
        [sys.executable, "-m", "jobs.main", "--events", str(EVENTS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # the totals computed by the query match what was produced, column by column
    produced = re.search(r"│ produced\s+│([^\n]+)", out)
    computed = re.search(r"│ in the Parquet output\s+│([^\n]+)", out)
    assert produced and computed, out
    assert produced.group(1) == computed.group(1)
    assert produced.group(1).split("│")[0].strip() == f"{EVENTS:,}"
    assert re.search(r"│ match\s+│(\s+yes\s+│){5}", out), out
    # the consumer group caught up on all 8 queues
    lag_rows = re.findall(r"│ broker-a\s+│\s+(\d+) │\s+([\d,]+) │\s+([\d,]+) │\s+([\d,]+) │", out)
    assert sorted(int(q) for q, *_ in lag_rows) == list(range(8)), out
    assert all(lag == "0" and committed == messages for _, messages, committed, lag in lag_rows)
    assert re.search(r"│ total\s+│\s+│\s+5,000 │\s+5,000 │\s+0 │", out), out
    assert "Parquet output:" in out
    # progress went to stderr; the working directory (servers' data, Parquet) is gone afterwards
    assert "events produced" in result.stderr
    workdir = re.search(r"working in\s+(\S+)", result.stderr)
    assert workdir, result.stderr
    assert not Path(workdir.group(1)).exists()
