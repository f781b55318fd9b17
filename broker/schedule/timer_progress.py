"""How far the timer service got, kept in `config/timerProgress.json`.

The service acts on each parked timer message once: it delivers it when due, or parks it again
(rolls it) when it has waited long. The file says which entries of the timer topic's queue were
acted on, in a few numbers whatever the number of messages:

* `throughMs`: every entry due at or before it that was stored when the file was written was acted
  on, except those in `late` (stored after their time had passed, or not stored yet when it did);
* `ahead`: entries acted on though due after `throughMs` (rolled, or delivered while an earlier
  one failed), kept until `throughMs` or `rollNext` covers them;
* `rollNext`: every entry below this offset was acted on (a start-up reads the queue from here);
* `commitLogOffset`: the commit log offset when it was written. Entries stored at or after it were
  not known then; what the service stored since then carries SCHEDULE_ORIGIN `timer:<offset>`
  (broker/schedule/timers.py) and is read back from the commit log at start-up, so nothing is
  delivered twice after a crash, with or without the duplicate window.
"""

from __future__ import annotations

import logging

import numpy as np
import orjson

from broker.schedule.timers import stored_origins
from broker.store.log.commitlog import CommitLog
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.protocol.body.jsonbody import loads

log = logging.getLogger(__name__)


def _keys(entries: dict[int, int]) -> np.ndarray:
    return np.fromiter(entries, np.int64, len(entries))


class TimerProgress:
    """What the timer service acted on (event loop)."""

    def __init__(self, writer: AtomicFileWriter) -> None:
        self._writer = writer
        self.through_ms = 0
        self.late: dict[int, int] = {}  # offset -> due
        self.ahead: dict[int, int] = {}  # offset -> due
        self.roll_next = 0
        self.watermark: int | None = None  # None: no file was written

    def acted(self, offset: int, due_ms: int) -> bool:
        """Whether the entry (stored by now: the service knows every stored entry) was acted on."""
        return (
            offset < self.roll_next or offset in self.ahead or (due_ms <= self.through_ms and offset not in self.late)
        )

    def acted_many(self, offsets: np.ndarray, dues: np.ndarray) -> np.ndarray:
        """:meth:`acted` of many entries at once."""
        return (
            (offsets < self.roll_next)
            | np.isin(offsets, _keys(self.ahead))
            | ((dues <= self.through_ms) & ~np.isin(offsets, _keys(self.late)))
        )

    def acted_at_start(self, offsets: np.ndarray, dues: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Which of the queue's entries (from `roll_next`; `positions`: their commit log positions)
        the file counts as acted on."""
        known = positions < self.watermark if self.watermark is not None else np.zeros(len(offsets), bool)
        late = np.isin(offsets, _keys(self.late))
        return np.isin(offsets, _keys(self.ahead)) | (known & (dues <= self.through_ms) & ~late)

    def stored(self, offset: int, due_ms: int) -> None:
        """A new entry: one due by `through_ms` is late."""
        if due_ms <= self.through_ms:
            self.late[offset] = due_ms

    def done(self, entries: list[tuple[int, int]]) -> None:
        """Count (due, offset) entries as acted on (after `through_ms` moved on for them)."""
        for due, offset in entries:
            self.late.pop(offset, None)
            if due > self.through_ms:
                self.ahead[offset] = due

    def load(self) -> None:
        path = self._writer.path
        if not path.exists():
            return
        data = loads(path.read_bytes())
        self.through_ms = int(data.get("throughMs") or 0)
        self.late = {int(o): int(d) for o, d in (data.get("late") or {}).items()}
        self.ahead = {int(o): int(d) for o, d in (data.get("ahead") or {}).items()}
        self.roll_next = int(data.get("rollNext") or 0)
        watermark = data.get("commitLogOffset")
        self.watermark = int(watermark) if watermark is not None else None
        log.info("timer progress loaded from %s: through %d, %d late", path, self.through_ms, len(self.late))

    def stored_since(self, commit_log: CommitLog) -> set[int]:
        """The parked offsets the service acted on after the file was written, found by their mark in
        the commit log written since (start-up, before acting: a tick or two of writes, on the loop)."""
        if self.watermark is None:
            return set()
        positions = commit_log.batches_between(max(self.watermark, commit_log.min_offset), commit_log.max_offset)
        return {offset for _, batch in commit_log.arrow_batches(positions) for offset in stored_origins(batch)}

    def persist(self, commit_log_offset: int | None) -> None:
        """Write the progress; every entry it does not know, and everything the service stores that it
        does not count, is stored at or after `commit_log_offset` (None: the last one written still
        holds, e.g. with stores of the service in flight)."""
        if commit_log_offset is not None:
            self.watermark = commit_log_offset
        self.ahead = {o: d for o, d in self.ahead.items() if o >= self.roll_next and d > self.through_ms}
        document = {
            "throughMs": self.through_ms,
            "late": {str(o): d for o, d in sorted(self.late.items())},
            "ahead": {str(o): d for o, d in sorted(self.ahead.items())},
            "rollNext": self.roll_next,
            "commitLogOffset": self.watermark,
        }
        self._writer.write(orjson.dumps(document, option=orjson.OPT_INDENT_2))
