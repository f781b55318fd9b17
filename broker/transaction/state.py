"""What the broker knows of its half messages: which ended and how, how often each was checked.

The truth lives in the store: half messages in RMQ_SYS_TRANS_HALF_TOPIC, end records in
RMQ_SYS_TRANS_OP_HALF_TOPIC, commits in their real queues (broker/transaction/half.py). The file
`config/transaction.json` keeps the progress: `halfOffset` (every half message below it ended),
`checkTimes` (checks sent per half message at or above it), `endedRuns` (how those at or above it
that ended did: each kind's offsets as runs, `12-40,45`; older files have `ended`, by offset),
`discarded` (half messages moved to TRANS_CHECK_MAX_TIME_TOPIC below it: an END may still commit
them), `rolledBack` (those below it that were rolled back: every other one below it committed, so
an END that contradicts the first is told so), `opOffset`: every end record below it in the op
queue is counted in the file, and `commitLogOffset`: no commit stored before it lacks its end
record. At startup only the end records from `opOffset` on are read back (as RocketMQ checks only
its last files: start-up does not grow with the op queue), and commits stored since
`commitLogOffset` without an end record (a crash between the two writes) are found in the commit
log, so a half message is committed at most once across a kill -9.
"""

from __future__ import annotations

import logging

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from broker.store.log.commitlog import CommitLog
from broker.transaction.half import EndKind
from broker.transaction.range_end import decode_runs, encode_runs
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.message import sysflag
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TRANS_HALF_TOPIC
from rocketspark.protocol.body.jsonbody import loads

log = logging.getLogger(__name__)

_PREPARED_OFFSET_PATTERN = (
    f"(?:^|{props.PROPERTY_SEPARATOR}){props.TRANSACTION_PREPARED_QUEUE_OFFSET}"
    f"{props.NAME_VALUE_SEPARATOR}(?P<offset>[0-9]+)"
)


class TransactionState:
    """Ended half messages and check counts (event loop)."""

    def __init__(self, writer: AtomicFileWriter) -> None:
        self._writer = writer
        self.next_half = 0  # every half message below this offset ended (or was discarded)
        self._ended: dict[int, EndKind] = {}  # offsets at or above `next_half`
        self._checks: dict[int, int] = {}  # offsets at or above `next_half` -> checks sent
        # below `next_half`: those discarded (not committed or rolled back since) or rolled back; the
        # others committed
        self._below: dict[int, EndKind] = {}
        self.watermark: int | None = None
        self.op_offset = 0  # end records of the op queue below it are counted here

    def final_kind(self, offset: int) -> EndKind | None:
        """COMMIT or ROLLBACK once either was stored: an END changes nothing any more (a discarded
        half message may still be committed or rolled back, as in Apache RocketMQ: None)."""
        kind = self._below.get(offset, EndKind.COMMIT) if offset < self.next_half else self._ended.get(offset)
        return None if kind is EndKind.DISCARD else kind

    def final_kinds(self, offsets: list[int]) -> list[EndKind | None]:
        """:meth:`final_kind` of each of `offsets` (a range end's step: thousands at once)."""
        below, ended, first, commit = self._below, self._ended, self.next_half, EndKind.COMMIT
        kinds = [below.get(o, commit) if o < first else ended.get(o) for o in offsets]
        return [None if kind is EndKind.DISCARD else kind for kind in kinds]

    def is_final(self, offset: int) -> bool:
        return self.final_kind(offset) is not None

    def has_ended(self, offset: int) -> bool:
        """Ended or discarded: no longer checked."""
        return offset < self.next_half or offset in self._ended

    def checks(self, offset: int) -> int:
        return self._checks.get(offset, 0)

    def checked(self, offset: int) -> int:
        self._checks[offset] = self._checks.get(offset, 0) + 1
        return self._checks[offset]

    def end(self, offset: int, kind: EndKind) -> None:
        if offset < self.next_half:
            if kind is not EndKind.DISCARD and self._below.get(offset) is EndKind.DISCARD:
                if kind is EndKind.COMMIT:
                    del self._below[offset]
                else:
                    self._below[offset] = kind
            return
        if self._ended.get(offset) not in (None, EndKind.DISCARD):
            return  # the first commit or rollback stays
        self._ended[offset] = kind
        self._checks.pop(offset, None)

    def end_many(self, offsets: list[int], kind: EndKind) -> None:
        """:meth:`end` of each of `offsets` (a range end's step)."""
        ended = self._ended
        if self._checks or min(offsets) < self.next_half or not ended.keys().isdisjoint(offsets):
            for offset in offsets:
                self.end(offset, kind)
            return
        ended.update(dict.fromkeys(offsets, kind))

    def advance(self, half_min_offset: int, to: int | None = None) -> None:
        """Move `next_half` past the ended half messages and those the half queue no longer holds
        (and to `to`, past which a check went, when given)."""
        offset = max(self.next_half, half_min_offset, to or 0)
        ended = np.fromiter(self._ended, dtype=np.int64, count=len(self._ended))
        ended.sort()  # a range end ends thousands a step: no walk of them one by one in Python
        start = int(np.searchsorted(ended, offset))
        run = ended[start:] - offset
        gaps = np.flatnonzero(run != np.arange(len(run)))
        offset += int(gaps[0]) if len(gaps) else len(run)
        for passed in ended[: int(np.searchsorted(ended, offset))].tolist():
            kind = self._ended.pop(passed)
            if kind is not EndKind.COMMIT:
                self._below[passed] = kind
        self._checks = {o: n for o, n in self._checks.items() if o >= offset}
        self._below = {o: kind for o, kind in self._below.items() if o >= half_min_offset}
        self.next_half = offset

    def load(self) -> None:
        path = self._writer.path
        if not path.exists():
            return
        data = loads(path.read_bytes())
        self.next_half = int(data.get("halfOffset") or 0)
        self._checks = {int(o): int(n) for o, n in (data.get("checkTimes") or {}).items()}
        self._below = {int(o): EndKind.DISCARD for o in data.get("discarded") or ()}
        self._below.update((int(o), EndKind.ROLLBACK) for o in data.get("rolledBack") or ())
        self._ended = {int(o): EndKind(kind) for o, kind in (data.get("ended") or {}).items()}  # files before runs
        for kind, runs in (data.get("endedRuns") or {}).items():
            self._ended.update(dict.fromkeys(decode_runs(runs) or (), EndKind(kind)))
        self.op_offset = int(data.get("opOffset") or 0)  # files from before it: read the whole op queue
        watermark = data.get("commitLogOffset")
        self.watermark = int(watermark) if watermark is not None else None
        log.info("transaction progress loaded from %s: half messages below %d ended", path, self.next_half)

    def committed_since_watermark(self, commit_log: CommitLog) -> list[int]:
        """Half offsets of the commits stored since the progress was written whose half message is
        not known to have ended (startup: reads that part of the commit log on the event loop).
        Without a progress file nothing is read: the broker writes it at its first start, before
        it serves, so no commit is older than the file (a store from before transactions has none)."""
        if self.watermark is None:
            return []
        start = max(self.watermark, commit_log.min_offset)
        positions = commit_log.batches_between(start, commit_log.max_offset)
        found = []
        for _, batch in commit_log.arrow_batches(positions):
            for offset in _commits(batch):
                if not self.is_final(offset):
                    found.append(offset)
        return found

    def persist(self, commit_log_offset: int, op_offset: int) -> None:
        """Write the progress; every commit stored before `commit_log_offset` has its end record, and
        every end record below `op_offset` is counted in this state."""
        self.watermark = commit_log_offset
        self.op_offset = op_offset
        document = {
            "halfOffset": self.next_half,
            "checkTimes": {str(o): n for o, n in sorted(self._checks.items())},
            "endedRuns": _runs_by_kind(self._ended),
            "discarded": sorted(o for o, kind in self._below.items() if kind is EndKind.DISCARD),
            "rolledBack": sorted(o for o, kind in self._below.items() if kind is EndKind.ROLLBACK),
            "opOffset": op_offset,
            "commitLogOffset": commit_log_offset,
        }
        self._writer.write(orjson.dumps(document, option=orjson.OPT_INDENT_2))


def _runs_by_kind(ended: dict[int, EndKind]) -> dict[str, str]:
    """The offsets of each kind of end as runs (`12-40,45`): a range end ends thousands at a time, and
    this is written every second."""
    by_kind: dict[EndKind, list[int]] = {}
    for offset, kind in ended.items():
        by_kind.setdefault(kind, []).append(offset)
    return {kind.value: encode_runs(np.sort(np.asarray(offsets, dtype=np.int64))) for kind, offsets in by_kind.items()}


def _commits(batch: pa.RecordBatch) -> list[int]:
    """TRAN_PREPARED_QUEUE_OFFSET of the committed transactional messages among stored ones."""
    flags = pc.bit_wise_and(batch.column("sys_flag"), pa.scalar(sysflag.TRANSACTION_TYPE_MASK, pa.int32()))
    commits = pc.and_(
        pc.equal(flags, sysflag.TRANSACTION_COMMIT_TYPE), pc.not_equal(batch.column("topic"), TRANS_HALF_TOPIC)
    )
    found = pc.extract_regex(pc.filter(batch.column("properties"), commits), _PREPARED_OFFSET_PATTERN)
    found = pc.filter(found, pc.is_valid(found))
    return [int(o) for o in found.field("offset").to_pylist()]
