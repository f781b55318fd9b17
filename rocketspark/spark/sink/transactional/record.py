"""A batch's transaction record: which task attempts' half messages commit, written ahead.

One JSON file per batch under the transaction log (`transactionLog`, by default
`<checkpointLocation>/rocketmq-transactions`): `<query id>/<batch id>.json` for a streaming batch,
`txn-<txnAppId>-<txnVersion>.json` or `job-<id>.json` for a batch write. Each half message names its
record's path and its task attempt (the properties RECORD_PROPERTY and ATTEMPT_PROPERTY), so any
producer of the group that can read the path answers the brokers' checks from it:

* no record: the batch has not committed yet (UNKNOWN);
* `committing`: UNKNOWN for the attempts it lists (the driver is ending them, or a restarted driver
  will: a check answering COMMIT meanwhile would race it, and Apache RocketMQ stores a commit that
  arrives twice twice), ROLLBACK for any other;
* `committed`: COMMIT for the attempts it lists (an end that never arrived), ROLLBACK for any other;
* `aborted`: ROLLBACK for the attempts it lists, UNKNOWN for others (a later run of the batch).

`committing` is written (atomically, fsynced) before the driver ends any half message and lists
every handle, so a driver that dies mid-commit finishes that same commit when the batch runs again.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from rocketspark.client.producer.transaction import HalfMessage, TransactionStatus
from rocketspark.fileutil import write_atomically

log = logging.getLogger(__name__)

#: properties of every half message the sink sends (kept by the committed message)
RECORD_PROPERTY = "RS_TXN_RECORD"
ATTEMPT_PROPERTY = "RS_TXN_ATTEMPT"


class RecordState(enum.Enum):
    COMMITTING = "committing"
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(frozen=True)
class BatchRecord:
    state: RecordState
    attempts: frozenset[str]  # committing/committed: the attempts that commit; aborted: those rolled back
    halves: tuple[HalfMessage, ...] = field(default=())  # committing/committed: every half message to commit

    def answer(self, attempt: str) -> TransactionStatus:
        """How a check of a half message of `attempt` is answered."""
        listed = attempt in self.attempts
        if self.state is RecordState.ABORTED:
            return TransactionStatus.ROLLBACK if listed else TransactionStatus.UNKNOWN
        if not listed:
            return TransactionStatus.ROLLBACK
        return TransactionStatus.COMMIT if self.state is RecordState.COMMITTED else TransactionStatus.UNKNOWN

    @property
    def commits(self) -> bool:
        return self.state is not RecordState.ABORTED

    def to_json(self) -> bytes:
        halves = [[h.topic, h.broker_name, h.queue_offset, h.commit_log_offset, h.msg_id] for h in self.halves]
        return orjson.dumps({"state": self.state.value, "attempts": sorted(self.attempts), "halves": halves})

    @classmethod
    def from_json(cls, data: bytes) -> BatchRecord:
        raw = orjson.loads(data)
        halves = tuple(HalfMessage(str(t), str(b), int(q), int(c), str(m)) for t, b, q, c, m in raw["halves"])
        return cls(RecordState(raw["state"]), frozenset(raw["attempts"]), halves)


def stream_record_path(log_dir: str, query_id: str, batch_id: int) -> str:
    return str(Path(log_dir) / query_id / f"{batch_id}.json")


def write_record_path(log_dir: str, name: str) -> str:
    return str(Path(log_dir) / f"{name}.json")


def load(path: str) -> BatchRecord | None:
    """The record at `path`; None when there is none (or it cannot be read here: logged)."""
    try:
        return BatchRecord.from_json(Path(path).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("transaction record %s cannot be read: %s", path, exc)
        return None


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold the record's lock (`flock` of `<path>.lock`): a commit or abort decides and writes the
    record under it, so two Python workers committing one batch at once (a stopped query's commit
    still running beside the restarted query's) agree on one attempt."""
    lock_path = Path(f"{path}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def save(path: str, record: BatchRecord) -> None:
    """Write the record durably (temporary file, fsync, rename, fsync of the directory)."""
    write_atomically(Path(path), record.to_json())
