"""The main job, run the way the README runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_main_job_runs_its_tour() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "jobs.main"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "GET_BROKER_CLUSTER_INFO(106)" in result.stdout
    assert "purpose = demo" in result.stdout
    assert "QUERY_NOT_FOUND(22)" in result.stdout  # the deleted key is gone
