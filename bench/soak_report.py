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
    anon_mib: float  # the part of RSS that is no file's pages: heap, Arrow buffers, stacks
    open_fds: int
    threads: int

    @classmethod
    def of(cls, pid: int) -> ProcessUse:
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
        )
        rss_kib, anon_kib = (int(status[field].split()[0]) for field in ("VmRSS", "RssAnon"))
        return cls(rss_kib / 1024, anon_kib / 1024, len(os.listdir(f"/proc/{pid}/fd")), int(status["Threads"]))


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system, every thread) a process has used since it started (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def disk_used_mib(directory: Path) -> float:
    return sum(disk_by_directory_mib(directory).values())


def disk_by_directory_mib(directory: Path) -> dict[str, float]:
    """The sizes of the files under each entry of `directory` (files directly in it count as ".")."""
    sizes: Counter[str] = Counter()
    for root, _dirs, files in os.walk(directory):
        top = Path(root).relative_to(directory).parts[:1]
        for name in files:
            try:
                sizes[top[0] if top else "."] += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # deleted by retention meanwhile
                continue
    return {name: size / MIB for name, size in sorted(sizes.items())}


@dataclass(frozen=True)
class Sample:
    """One interval of the soak: the broker's resources at its end, sends and lag during it."""

    at_s: float
    broker_life: int  # 1 before the restart, 2 after
    rss_mib: float
    anon_mib: float
    heap_in_use_mib: float  # the C library's heaps, live blocks (Arrow's included)
    heap_free_mib: float  # free in those heaps: what fragmentation keeps
    arrow_mib: float
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
    "anon MiB",
    "heap used MiB",
    "heap free MiB",
    "Arrow MiB",
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


def settled(samples: list[Sample], from_s: float) -> list[Sample]:
    """The restarted broker's samples from `from_s` on (its warm-up over); at least all but its first."""
    restarted = [s for s in samples if s.broker_life == 2]
    late = [s for s in restarted if s.at_s >= from_s]
    return late if len(late) >= 2 else restarted[1:]


def slope_mib_per_hour(samples: list[Sample], field: str) -> float:
    """Least-squares slope of `field` over `samples`."""
    if len(samples) < 2:
        return float("nan")
    slope = np.polyfit([s.at_s for s in samples], [getattr(s, field) for s in samples], 1)[0]
    return round(float(slope) * 3600, 2)


def summary(
    samples: list[Sample],
    settled_from_s: float,
    checks: list[ReaderCheck],
    counts: dict[str, int],
    disk_at_end: dict[str, float],
) -> dict[str, object]:
    """The end figures of a soak (see `bench/soak.py`); slopes and bounds over the samples from
    `settled_from_s` on. `counts`: acknowledged, failed_sends, segments_deleted_by_retention."""
    calm = settled(samples, settled_from_s) or samples
    return {
        "acknowledged": counts["acknowledged"],
        "failed_sends": counts["failed_sends"],
        "readers": [asdict(c) for c in checks],
        "settled_from_s": round(calm[0].at_s, 1),
        "rss_slope_mib_per_hour_after_warm_up": slope_mib_per_hour(calm, "rss_mib"),
        "anon_slope_mib_per_hour_after_warm_up": slope_mib_per_hour(calm, "anon_mib"),
        "heap_in_use_slope_mib_per_hour_after_warm_up": slope_mib_per_hour(calm, "heap_in_use_mib"),
        "heap_free_slope_mib_per_hour_after_warm_up": slope_mib_per_hour(calm, "heap_free_mib"),
        "disk_slope_mib_per_hour_after_warm_up": slope_mib_per_hour(calm, "disk_mib"),
        "fds_min_max_after_warm_up": [min(s.open_fds for s in calm), max(s.open_fds for s in calm)],
        "threads_min_max_after_warm_up": [min(s.threads for s in calm), max(s.threads for s in calm)],
        "disk_mib_max": max(s.disk_mib for s in samples),
        "segments_deleted_by_retention": counts["segments_deleted_by_retention"],
        "disk_mib_by_directory_at_end": {name: round(mib, 2) for name, mib in disk_at_end.items()},
    }


def plot(samples: list[Sample], restart_at_s: float, path: Path) -> None:
    """The per-interval series, one panel each, the broker's restart marked."""
    import matplotlib  # noqa: PLC0415 - only the soak plots; matplotlib is slow to import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    minutes = [s.at_s / 60 for s in samples]
    panels: list[tuple[str, list[list[float]], list[str]]] = [
        ("RSS (MiB)", [[s.rss_mib for s in samples], [s.anon_mib for s in samples]], ["broker", "anonymous"]),
        (
            "C heap, Arrow (MiB)",
            [[s.heap_in_use_mib for s in samples], [s.heap_free_mib for s in samples], [s.arrow_mib for s in samples]],
            ["heap in use", "heap free", "Arrow"],
        ),
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
