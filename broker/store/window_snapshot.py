"""The duplicate window saved to a file, so a restart does not read the log's recent records again.

The window's key tables only ever append entries, so a snapshot taken on the event loop is the
filled part of each table's arrays (views: nothing is copied on the loop) and `through`, the end
of the commit log at that moment: the window then held the keys of every record before it. The
file is written on another thread at shutdown and every SNAPSHOT_INTERVAL_S; startup restores
the tables from it and adds the keys of the records from `through` on, read from the log
(broker/store/dedup.py, `DuplicateWindow.recover`).
"""

from __future__ import annotations

import io
import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rocketspark.fileutil import write_atomically

log = logging.getLogger(__name__)

SNAPSHOT_INTERVAL_S = 30.0
_VERSION = 1
_COLUMNS = ("hashes", "timestamps", "queue_ids", "queue_offsets", "commit_log_offsets")


@dataclass(frozen=True, slots=True)
class TableEntries:
    """The entries of one key table, oldest first."""

    hashes: np.ndarray
    timestamps: np.ndarray
    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    commit_log_offsets: np.ndarray

    def below(self, end: int) -> TableEntries:
        """The entries whose first copy lies before commit log offset `end` (a recovered log's end)."""
        kept = self.commit_log_offsets < end
        return TableEntries(*(getattr(self, name)[kept] for name in _COLUMNS))


@dataclass(frozen=True, slots=True)
class WindowSnapshot:
    through: int  # the window held the keys of every record before this commit log offset
    window_ms: int
    capacity: int  # keys a table holds: a snapshot of another capacity is not restored
    tables: list[TableEntries]

    def save(self, path: Path) -> None:
        """Write the snapshot (blocking: a thread of its own, the arrays may be large)."""
        arrays: dict[str, np.ndarray] = {
            "meta": np.array([_VERSION, self.through, self.window_ms, self.capacity, len(self.tables)], np.int64)
        }
        for number, table in enumerate(self.tables):
            for name in _COLUMNS:
                arrays[f"{name}{number}"] = getattr(table, name)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)  # type: ignore[arg-type]
        write_atomically(path, buffer.getvalue())

    @classmethod
    def load(cls, path: Path) -> WindowSnapshot | None:
        """The saved snapshot, or None when there is none or it is unreadable (blocking)."""
        try:
            with np.load(path, allow_pickle=False) as saved:
                version, through, window_ms, capacity, count = (int(v) for v in saved["meta"])
                if version != _VERSION:
                    raise ValueError(f"version {version}")
                tables = [TableEntries(*(saved[f"{name}{n}"] for name in _COLUMNS)) for n in range(count)]
        except FileNotFoundError:
            return None
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
            log.warning("duplicate window snapshot %s is unreadable (%s); reading recent records instead", path, exc)
            return None
        return cls(through, window_ms, capacity, tables)
