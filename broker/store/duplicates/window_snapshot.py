"""The duplicate window saved to a file, so a restart does not read the log's recent records again.

The window's key tables only ever append entries, so a snapshot taken on the event loop is the
filled part of each table's arrays (views: nothing is copied on the loop) and `through`, the end
of the commit log at that moment: the window then held the keys of every record before it. The
file is written on another thread at shutdown and every SNAPSHOT_INTERVAL_S; startup restores
the tables from it and adds the keys of the records from `through` on, read from the log
(broker/store/duplicates/window.py, `DuplicateWindow.recover`).
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from rocketspark.fileutil import write_atomically

log = logging.getLogger(__name__)

SNAPSHOT_INTERVAL_S = 30.0
_VERSION = 1
_COLUMNS = ("hashes", "timestamps", "queue_ids", "queue_offsets", "commit_log_offsets")
_ARRAYS = (*_COLUMNS, "slots", "filter")
_LENGTH = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class TableEntries:
    """The entries of one key table, oldest first."""

    hashes: np.ndarray
    timestamps: np.ndarray
    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    commit_log_offsets: np.ndarray
    # the table's hash slots and filter, when saved: restored as they are (none placed again)
    slots: np.ndarray | None = None
    filter: np.ndarray | None = None

    def below(self, end: int) -> TableEntries:
        """The entries whose first copy lies before commit log offset `end` (a recovered log's end);
        without slots and filter when some are dropped (the others are then placed again)."""
        kept = self.commit_log_offsets < end
        if kept.all():
            return self
        return TableEntries(*(getattr(self, name)[kept] for name in _COLUMNS))


@dataclass(frozen=True, slots=True)
class WindowSnapshot:
    through: int  # the window held the keys of every record before this commit log offset
    window_ms: int
    capacity: int  # keys a table holds: a snapshot of another capacity is not restored
    tables: list[TableEntries]

    def save(self, path: Path) -> None:
        """Write the snapshot (blocking: a thread of its own, the arrays may be large): a JSON
        header naming each array's dtype, length and place, then the arrays' bytes."""
        arrays: list[tuple[str, np.ndarray]] = []
        for number, table in enumerate(self.tables):
            arrays += [
                (f"{name}{number}", getattr(table, name)) for name in _ARRAYS if getattr(table, name) is not None
            ]
        places: dict[str, tuple[str, int, int]] = {}
        at = 0
        for name, array in arrays:
            places[name] = (array.dtype.str, len(array), at)
            at += array.nbytes
        header = orjson.dumps(
            {
                "version": _VERSION,
                "through": self.through,
                "windowMs": self.window_ms,
                "capacity": self.capacity,
                "tables": len(self.tables),
                "arrays": places,
            }
        )
        parts: list[bytes | memoryview] = [_LENGTH.pack(len(header)) + header]
        parts += [np.ascontiguousarray(array).data.cast("B") for _, array in arrays]
        write_atomically(path, parts)

    @classmethod
    def load(cls, path: Path) -> WindowSnapshot | None:
        """The saved snapshot, or None when there is none or it is unreadable (blocking). Its arrays
        are writable views of one buffer read at once."""
        try:
            with path.open("rb") as file:
                data = np.empty(os.fstat(file.fileno()).st_size, dtype=np.uint8)  # not zeroed first
                if file.readinto(data.data) != len(data):
                    raise ValueError("the file changed while it was read")
            (length,) = _LENGTH.unpack_from(data.data)
            header = orjson.loads(bytes(data[_LENGTH.size : _LENGTH.size + length]))
            if header["version"] != _VERSION:
                raise ValueError(f"version {header['version']}")
            body = data[_LENGTH.size + length :]

            def array(name: str) -> np.ndarray | None:
                if name not in header["arrays"]:
                    return None
                dtype, count, at = header["arrays"][name]
                return np.frombuffer(body, dtype=np.dtype(dtype), count=count, offset=at)

            tables = []
            for n in range(int(header["tables"])):
                columns = [array(f"{name}{n}") for name in _ARRAYS]
                if any(c is None for c in columns[: len(_COLUMNS)]):
                    raise ValueError(f"table {n} lacks a column")
                tables.append(TableEntries(*columns))  # type: ignore[arg-type]
        except FileNotFoundError:
            return None
        except (OSError, KeyError, TypeError, ValueError, struct.error, orjson.JSONDecodeError) as exc:
            log.warning("duplicate window snapshot %s is unreadable (%s); reading recent records instead", path, exc)
            return None
        return cls(int(header["through"]), int(header["windowMs"]), int(header["capacity"]), tables)
