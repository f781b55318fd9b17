"""How far the schedule service got: per delay level, the next SCHEDULE_TOPIC_XXXX offset to deliver
and the offsets above it delivered already, kept in `config/delayOffset.json`.

Storing a delivery and writing the progress that counts it are two writes, and a crash can fall
between them. So the file holds, beside Java's `{"offsetTable": {level: offset}}`, the commit log
offset at which it was written (`commitLogOffset`): every delivery it does not count is stored at or
after that offset, and carries SCHEDULE_ORIGIN (broker/schedule/delay_levels.py). At startup the deliveries
stored since then are read back from the commit log and counted, so none is delivered twice, with
or without the duplicate window. Offsets delivered out of order (a later run stored, an earlier one
refused) are kept in `deliveredAhead` until the offsets below them are delivered too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import orjson

from broker.schedule.delay_levels import delivered_origins
from broker.store.log.commitlog import CommitLog
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.protocol.body.jsonbody import loads

log = logging.getLogger(__name__)


class DeliveryProgress:
    """What was delivered, per delay level (event loop)."""

    def __init__(self, writer: AtomicFileWriter) -> None:
        self._writer = writer
        self._next: dict[int, int] = {}  # level -> every offset below it is delivered
        self._ahead: dict[int, set[int]] = {}  # level -> offsets at or above `_next` delivered
        self.watermark: int | None = None  # the commit log offset of the last write; None: not known

    @property
    def levels(self) -> dict[int, int]:
        """Level -> the next offset to deliver (Java's offsetTable)."""
        return dict(self._next)

    def offset(self, level: int) -> int:
        return self._next.get(level, 0)

    def is_delivered(self, level: int, offset: int) -> bool:
        return offset < self.offset(level) or offset in self._ahead.get(level, ())

    def delivered(self, level: int, offsets: Iterable[int]) -> None:
        """Count `offsets` of `level` as delivered (or not to be delivered)."""
        ahead = self._ahead.setdefault(level, set())
        ahead.update(o for o in offsets if o >= self.offset(level))
        self._advance(level, self.offset(level))

    def skip_to(self, level: int, offset: int) -> None:
        """Messages of `level` below `offset` are gone: nothing below it is to be delivered."""
        self._advance(level, max(offset, self.offset(level)))

    def _advance(self, level: int, offset: int) -> None:
        ahead = self._ahead.get(level, set())
        while offset in ahead:
            offset += 1
        self._next[level] = offset
        self._ahead[level] = {o for o in ahead if o > offset}
        if not self._ahead[level]:
            del self._ahead[level]

    def load(self) -> None:
        path = self._writer.path
        if not path.exists():
            return
        data = loads(path.read_bytes())
        self._next = {int(level): int(offset) for level, offset in (data.get("offsetTable") or {}).items()}
        ahead = data.get("deliveredAhead") or {}
        self._ahead = {int(level): {int(o) for o in offsets} for level, offsets in ahead.items() if offsets}
        watermark = data.get("commitLogOffset")
        self.watermark = int(watermark) if watermark is not None else None
        log.info("delivery progress of %d delay level(s) loaded from %s", len(self._next), path)

    def recover(self, commit_log: CommitLog) -> None:
        """Count the deliveries stored since the progress was written (startup, before delivering:
        reads the commit log written since then, a few ticks' worth, on the event loop)."""
        if self.watermark is None:
            if self._next:
                log.warning("delayOffset.json names no commitLogOffset: deliveries since it was written may repeat")
            return
        positions = commit_log.batches_between(max(self.watermark, commit_log.min_offset), commit_log.max_offset)
        found = 0
        for _, batch in commit_log.arrow_batches(positions):
            for level, offset in delivered_origins(batch):
                if not self.is_delivered(level, offset):
                    self.delivered(level, [offset])
                    found += 1
        if found:
            log.info("%d delayed message(s) found delivered after the last progress write: not delivered again", found)

    def persist(self, commit_log_offset: int) -> None:
        """Write the progress; every delivery it does not count will be stored at or after
        `commit_log_offset` (the caller has none in flight)."""
        self.watermark = commit_log_offset
        table = {str(level): offset for level, offset in sorted(self._next.items())}
        ahead = {str(level): sorted(offsets) for level, offsets in sorted(self._ahead.items())}
        document = {"offsetTable": table, "deliveredAhead": ahead, "commitLogOffset": commit_log_offset}
        self._writer.write(orjson.dumps(document, option=orjson.OPT_INDENT_2))
