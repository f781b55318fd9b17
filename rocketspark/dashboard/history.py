"""The dashboard's memory of figures over time: one SQLite file (`<data dir>/history.sqlite3`).

Samples are (kind, subject, detail, time, value) rows: a group's lag on a topic (`lag`, group,
topic), a topic's messages stored so far (`stored`, topic: the sum of its queues' max offsets, whose
differences are the messages put in between), a broker's rates (`in` and `out`, broker name).
Rows older than the retention (24 h at least) are deleted as new ones come, and the file never
holds more than `max_rows` rows (the oldest go first), so it stays small whatever the cluster.
SQLite is used from one thread of its own: the event loop never waits on the disk.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: how long samples are kept by default (the dashboard promises at least 24 h)
DEFAULT_RETENTION_S = 26 * 3600
#: the most rows the file holds (about 60 bytes a row)
DEFAULT_MAX_ROWS = 2_000_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    kind TEXT NOT NULL, subject TEXT NOT NULL, detail TEXT NOT NULL, ts INTEGER NOT NULL, value REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_by_series ON samples (kind, subject, ts);
CREATE INDEX IF NOT EXISTS samples_by_time ON samples (ts);
"""


@dataclass(frozen=True, slots=True)
class Sample:
    kind: str
    subject: str
    detail: str
    ts: int  # ms
    value: float


class History:
    def __init__(
        self, path: Path, *, retention_s: float = DEFAULT_RETENTION_S, max_rows: int = DEFAULT_MAX_ROWS
    ) -> None:
        self.path = path
        self.retention_s = retention_s
        self.max_rows = max_rows
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dashboard-history")
        self._db: sqlite3.Connection | None = None

    async def _run(self, work: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, work, *args)

    async def open(self) -> None:
        await self._run(self._open)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path)
        self._db.executescript(_SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("the history is not open")
        return self._db

    async def add(self, samples: Iterable[Sample], now_ms: int) -> None:
        """Store `samples`; drop rows past the retention and beyond `max_rows`."""
        await self._run(self._add, list(samples), now_ms)

    def _add(self, samples: list[Sample], now_ms: int) -> None:
        db = self._conn()
        with db:
            db.executemany(
                "INSERT INTO samples VALUES (?, ?, ?, ?, ?)",
                [(s.kind, s.subject, s.detail, s.ts, s.value) for s in samples],
            )
            db.execute("DELETE FROM samples WHERE ts < ?", (now_ms - int(self.retention_s * 1000),))
            (rows,) = db.execute("SELECT count(*) FROM samples").fetchone()
            if rows > self.max_rows:
                db.execute(
                    "DELETE FROM samples WHERE rowid IN (SELECT rowid FROM samples ORDER BY ts LIMIT ?)",
                    (rows - self.max_rows,),
                )

    async def series(self, kind: str, subject: str, since_ms: int) -> dict[str, list[tuple[int, float]]]:
        """detail -> [(time, value)] of one kind and subject since `since_ms`, oldest first."""
        rows: Sequence[tuple[str, int, float]] = await self._run(self._series, kind, subject, since_ms)
        out: dict[str, list[tuple[int, float]]] = {}
        for detail, ts, value in rows:
            out.setdefault(detail, []).append((ts, value))
        return out

    def _series(self, kind: str, subject: str, since_ms: int) -> list[tuple[str, int, float]]:
        cursor = self._conn().execute(
            "SELECT detail, ts, value FROM samples WHERE kind = ? AND subject = ? AND ts >= ? ORDER BY ts",
            (kind, subject, since_ms),
        )
        return cursor.fetchall()

    async def close(self) -> None:
        if self._db is not None:
            await self._run(self._conn().close)
            self._db = None
        self._thread.shutdown(wait=True)
