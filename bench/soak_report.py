"""The soak's figures: a process's resources, the per-interval samples, the end summary and the plot."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

MIB = 1024 * 1024


@dataclass(frozen=True)
class ProcessUse:
    """What one process holds now (Linux /proc)."""

    rss_mib: float
    open_fds: int
    threads: int

    @classmethod
    def of(cls, pid: int) -> ProcessUse:
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
        )
        rss_kib = int(status["VmRSS"].split()[0])
        return cls(rss_kib / 1024, len(os.listdir(f"/proc/{pid}/fd")), int(status["Threads"]))


def disk_used_mib(directory: Path) -> float:
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # deleted by retention meanwhile
                continue
    return total / MIB


@dataclass(frozen=True)
class Sample:
    """One interval of the soak: the broker's resources at its end, sends and lag during it."""

    at_s: float
    broker_life: int  # 1 before the restart, 2 after
    rss_mib: float
    open_fds: int
    threads: int
    disk_mib: float
    sends: int
    send_p99_ms: float
    lag_lite_pull: int
    lag_push: int
    lag_spark: int

    def row(self) -> list[object]:
        return list(asdict(self).values())


SAMPLE_COLUMNS = [
    "s",
    "broker",
    "RSS MiB",
    "fds",
    "threads",
    "disk MiB",
    "sends",
    "send p99 ms",
    "lag lite-pull",
    "lag push",
    "lag Spark",
]


@dataclass(frozen=True)
class ReaderCheck:
    """Acknowledged messages against what one reader read."""

    name: str
    read: int
    lost: int  # acknowledged, never read
    duplicates: int  # reads beyond the first of a message
    unacknowledged: int  # read, but the send was not acknowledged (it failed or timed out after storing)

    @classmethod
    def of(cls, name: str, acknowledged: set[bytes], reads: Counter[bytes]) -> ReaderCheck:
        return cls(
            name,
            sum(reads.values()),
            len(acknowledged - reads.keys()),
            sum(n - 1 for n in reads.values() if n > 1),
            len(reads.keys() - acknowledged),
        )


def rss_slope_mib_per_hour(samples: list[Sample]) -> float:
    """Least-squares slope of RSS over the restarted broker's samples after its first (its warm-up)."""
    settled = [s for s in samples if s.broker_life == 2][1:]
    if len(settled) < 2:
        return float("nan")
    slope = np.polyfit([s.at_s for s in settled], [s.rss_mib for s in settled], 1)[0]
    return round(float(slope) * 3600, 2)


def summary(
    samples: list[Sample], acknowledged: int, checks: list[ReaderCheck], failed_sends: int, segments_deleted: int
) -> dict[str, object]:
    """The end figures of a soak (see `bench/soak.py`)."""
    settled = [s for s in samples if s.broker_life == 2][1:] or samples
    return {
        "acknowledged": acknowledged,
        "failed_sends": failed_sends,
        "readers": [asdict(c) for c in checks],
        "rss_slope_mib_per_hour_after_warm_up": rss_slope_mib_per_hour(samples),
        "fds_min_max_after_warm_up": [min(s.open_fds for s in settled), max(s.open_fds for s in settled)],
        "threads_min_max_after_warm_up": [min(s.threads for s in settled), max(s.threads for s in settled)],
        "disk_mib_max": max(s.disk_mib for s in samples),
        "segments_deleted_by_retention": segments_deleted,
    }


def plot(samples: list[Sample], restart_at_s: float, path: Path) -> None:
    """The per-interval series, one panel each, the broker's restart marked."""
    import matplotlib  # noqa: PLC0415 - only the soak plots; matplotlib is slow to import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    minutes = [s.at_s / 60 for s in samples]
    panels: list[tuple[str, list[list[float]], list[str]]] = [
        ("RSS (MiB)", [[s.rss_mib for s in samples]], ["broker"]),
        (
            "open fds / threads",
            [[float(s.open_fds) for s in samples], [float(s.threads) for s in samples]],
            ["fds", "threads"],
        ),
        ("disk used (MiB)", [[s.disk_mib for s in samples]], ["store"]),
        ("single send p99 (ms)", [[s.send_p99_ms for s in samples]], ["p99"]),
        (
            "consumer lag (messages)",
            [
                [float(s.lag_lite_pull) for s in samples],
                [float(s.lag_push) for s in samples],
                [float(s.lag_spark) for s in samples],
            ],
            ["lite-pull", "push", "Spark"],
        ),
    ]
    figure, axes = plt.subplots(len(panels), 1, figsize=(8, 2.2 * len(panels)), sharex=True)
    for axis, (title, series, labels) in zip(axes, panels, strict=True):
        for values, label in zip(series, labels, strict=True):
            axis.plot(minutes, values, marker=".", label=label)
        axis.axvline(restart_at_s / 60, color="grey", linestyle="--", linewidth=0.8)
        axis.set_ylabel(title, fontsize=8)
        axis.legend(fontsize=7, loc="upper left")
    axes[-1].set_xlabel("minutes (dashed: broker restart)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
