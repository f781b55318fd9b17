"""Figures: percentiles, a printed table, and a JSON record under bench/results/."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.environment import describe
from rocketspark.tables import format_table

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def percentiles_ms(latencies_s: Sequence[float], *points: float) -> list[float]:
    if not len(latencies_s):
        return [float("nan")] * len(points)
    values = np.percentile(np.asarray(latencies_s) * 1000, points)
    return [round(float(v), 2) for v in values]


def progress(message: str) -> None:
    print(f"  .. {message}", flush=True)


def record(scenario: str, columns: list[str], rows: list[list[Any]], notes: dict[str, Any]) -> Path:
    """Print the table and write it, with the machine's description, as JSON."""
    print()
    print(format_table(columns, rows))
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS_DIR / f"{scenario}-{stamp}.json"
    document = {
        "scenario": scenario,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "environment": describe(),
        "columns": columns,
        "rows": rows,
        "notes": notes,
    }
    path.write_text(json.dumps(document, indent=2, default=str))
    print(f"\n  recorded in {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    return path
