"""A batch's transaction record: which task attempts' half messages commit, written ahead.

One JSON file per batch under the transaction log (`transactionLog`, by default
`<checkpointLocation>/rocketmq-transactions`, a local path or a URI: storage.py):
`<query id>/<batch id>.json` for a streaming batch, `txn-<txnAppId>-<txnVersion>.json` for a batch
write. Each half message names its record's path and
its task attempt (the properties RECORD_PROPERTY and ATTEMPT_PROPERTY, which a copy of it keeps as it
keeps its UNIQ_KEY), so the driver's producers, which the brokers ask (listener.py), answer the
checks from it:

* no record: the batch has not committed yet (UNKNOWN);
* `committing`: UNKNOWN for the attempts it lists (the driver is ending them, or a restarted driver
  will: a check answering COMMIT meanwhile would race it, and Apache RocketMQ stores a commit that
  arrives twice twice), ROLLBACK for any other;
* `committed`: ROLLBACK. The driver marks a record committed once the brokers stored the END of
  every half message it lists, so a check of one of them is about a copy (Apache's check writes an
  open half message back to its half queue and asks about the copy, which carries the same UNIQ_KEY,
  record and attempt under new offsets) or raced that END: committing it would store its row twice.
  Other attempts' half messages never commit;
* `aborted`: ROLLBACK for the attempts it lists, UNKNOWN for others (a later run of the batch).

A streaming query's commit deletes the records and locks of its batches 100 and more batches back.

`committing` is written (atomically, fsynced, its directories too) before the driver ends any half
message and lists where the half messages are (per task attempt and broker, a range of half-queue
offsets: O(tasks x brokers), not O(rows); ranges.py) and the max offset of each queue they commit
to, so a driver that dies mid-commit is followed, when the batch runs again, by one that finishes
that same commit, leaving out the rows already in their queues
(:mod:`rocketspark.spark.sink.transactional.stored`). A record that exists but cannot be read fails
the commit (:class:`rocketspark.errors.TransactionRecordError`): only a missing file means "no
record".
"""

from __future__ import annotations

import contextlib
import enum
import logging
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from rocketspark.client.producer.transaction import TransactionStatus
from rocketspark.errors import TransactionRecordError
from rocketspark.spark.sink.transactional.storage import flocked, is_local, join, records_of
from rocketspark.spark.sink.transactional.stored import QueueStart

log = logging.getLogger(__name__)

#: records of a query's batches kept: Spark's default spark.sql.streaming.minBatchesToRetain. Spark runs
#: only the last batch again, so any count of one or more would do; the setting itself cannot be read,
#: as Spark runs the commit in a Python worker that gets the write's options, not the SQL settings
RETAINED_BATCHES = 100

#: properties of every half message the sink sends (kept by the committed message)
RECORD_PROPERTY = "RS_TXN_RECORD"
ATTEMPT_PROPERTY = "RS_TXN_ATTEMPT"
#: of a half message sent alone: its row's place among the attempt's (sends overlap, so the half
#: queue may hold them in another order; the ENDs go in this one)
SEQUENCE_PROPERTY = "RS_TXN_SEQ"


class RecordState(enum.Enum):
    COMMITTING = "committing"
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class HalfRange:
    """`count` half messages of task attempt `attempt` lie in offsets [first, last] of queue 0 of
    RMQ_SYS_TRANS_HALF_TOPIC on `broker_name` (among others'); `batched`: sent as batches of half
    messages of the attempt's transaction, which the broker ends by the range (ending.py), else one
    by one, read back to be ended (ranges.py)."""

    attempt: str
    broker_name: str
    first: int
    last: int
    count: int
    batched: bool = False


@dataclass(frozen=True)
class BatchRecord:
    state: RecordState
    attempts: frozenset[str]  # committing/committed: the attempts that commit; aborted: those rolled back
    #: committing/committed: where the half messages to commit are, one range per attempt and broker
    ranges: tuple[HalfRange, ...] = field(default=())
    #: committing/committed: each queue the half messages commit to and its max offset before the first END
    starts: tuple[QueueStart, ...] = field(default=())

    def answer(self, attempt: str) -> TransactionStatus:
        """How a check of a half message of `attempt` is answered (module docstring)."""
        listed = attempt in self.attempts
        if self.state is RecordState.ABORTED:
            return TransactionStatus.ROLLBACK if listed else TransactionStatus.UNKNOWN
        if self.state is RecordState.COMMITTING and listed:
            return TransactionStatus.UNKNOWN
        return TransactionStatus.ROLLBACK

    @property
    def commits(self) -> bool:
        return self.state is not RecordState.ABORTED

    def to_json(self) -> bytes:
        ranges = [
            [r.attempt, r.broker_name, r.first, r.last, r.count, *([1] if r.batched else [])] for r in self.ranges
        ]
        document = {"state": self.state.value, "attempts": sorted(self.attempts), "ranges": ranges}
        return orjson.dumps({**document, "starts": [list(start) for start in self.starts]})

    @classmethod
    def from_json(cls, data: bytes) -> BatchRecord:
        raw = orjson.loads(data)
        state = RecordState(raw["state"])
        if "halves" in raw and state is RecordState.COMMITTING:
            raise ValueError("a commit begun by rocketspark before offset ranges, which this version cannot finish")
        ranges = tuple(
            HalfRange(str(a), str(b), int(f), int(la), int(c), bool(batched and batched[0]))
            for a, b, f, la, c, *batched in raw.get("ranges", ())
        )
        starts = tuple((str(t), str(b), int(q), int(o)) for t, b, q, o in raw.get("starts", ()))
        return cls(state, frozenset(raw["attempts"]), ranges, starts)


def stream_record_path(log_dir: str, query_id: str, batch_id: int) -> str:
    return join(log_dir, query_id, f"{batch_id}.json")


def forget_old_batches(record_path: str, retained: int = RETAINED_BATCHES) -> int:
    """Delete the records and locks of the query's batches `retained` or more batches older than the
    one at `record_path` (a streaming batch's); how many records went. Spark runs only a query's last
    batch again, so no commit reads them; a check of a stray half message of one is answered UNKNOWN."""
    records = records_of(record_path)
    directory, name = _split(record_path)
    newest = int(name.removesuffix(".json"))
    forgotten = 0
    for old in records.names(directory):
        stem = old.removesuffix(".json")
        if old.endswith(".json") and stem.isdigit() and int(stem) <= newest - retained:
            records.delete(join(directory, old))
            forgotten += 1
    return forgotten


def write_record_path(log_dir: str, name: str) -> str:
    return join(log_dir, f"{name}.json")


def _split(path: str) -> tuple[str, str]:
    """(directory, name) of a record's local path or URI."""
    if is_local(path):
        return str(Path(path).parent), Path(path).name
    return posixpath.dirname(path), posixpath.basename(path)


def load(path: str) -> BatchRecord | None:
    """The record at `path`; None when there is none. TransactionRecordError when the file exists but
    cannot be read or is not a record."""
    try:
        data = records_of(path).read(path)
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    if data is None:
        return None
    try:
        return BatchRecord.from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise _unreadable(path, exc) from exc


def _unreadable(path: str, cause: Exception) -> TransactionRecordError:
    return TransactionRecordError(
        f"transaction record {path} cannot be read ({cause}): whether its batch committed is not known, so "
        "nothing is ended from it. Make the file readable (permissions, the transactionLog mount) and run "
        "the query again; if it is damaged, restore it from a backup or, when no END of its batch was sent "
        "(no row of the batch is in the topic), delete it"
    )


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold the record's lock (`flock`, storage.py): a commit or abort decides and writes the record
    under it, so two Python workers committing one batch at once (a stopped query's commit still
    running beside the restarted query's) agree on one attempt."""
    with flocked(records_of(path).lock_file(path), wait=True):
        yield


@contextlib.contextmanager
def locked_if_free(path: str) -> Iterator[bool]:
    """Hold the record's lock if no one holds it (a commit under way does); whether it is held."""
    with flocked(records_of(path).lock_file(path), wait=False) as held:
        yield held


def save(path: str, record: BatchRecord) -> None:
    """Write the record durably (storage.py: on a local disk, a temporary file, fsync, rename, fsync
    of the directory)."""
    records_of(path).write(path, record.to_json())
