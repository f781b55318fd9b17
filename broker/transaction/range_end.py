"""Half messages of one transaction ended by offset range (END_TRANSACTION_RANGE), as whole columns.

The bundled broker's extension for batches of half messages (ARROW_SEND_HALF_MESSAGE): a range of
the half queue holds the half messages of many transactions; the request names one by its producer
group (PGROUP) and `__transactionId__`, and the broker ends those in the range, in offset order.
Everything here is Arrow compute over the rows read from the half queue, no Python loop per row,
turning them into the commits stored in their real queues: one producer batch per run of rows that
share a real queue and what a stored batch holds once (born time and host, sys flag, reconsume
times), each row carrying TRAN_PREPARED_QUEUE_OFFSET as a single END's commit does
(broker/transaction/half.py).

The broker remembers the batches of half messages it stored since it started (`HalfBatches`):
their offsets, transaction, real queue and the properties every row of one carries at its end, so
the rows of a remembered batch are committed without reading their properties (`batch_commit`);
other rows (stored before a restart, or sent alone) are picked by their properties
(`transaction_rows`, `commit_runs`). An end record of a range lists its offsets as runs
(`12-40,45`), read back by :func:`broker.transaction.half.ended`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker.store.writer.append_requests import StandardBatchFields
from rocketspark.message import sysflag
from rocketspark.message.batches.schema import PRODUCER_SCHEMA, STORED_SCHEMA
from rocketspark.message.properties import codec as props
from rocketspark.message.properties.columns import property_values

_SEP = props.PROPERTY_SEPARATOR
_EQ = props.NAME_VALUE_SEPARATOR
#: a half message's properties that its commit does not keep (committed_message's)
_DROPPED = (props.REAL_TOPIC, props.REAL_QUEUE_ID, props.TRANSACTION_PREPARED)
_DROP_PATTERN = f"{_SEP}(?:{'|'.join(_DROPPED)}){_EQ}[^{_SEP}]*"


def _prefixed(properties: pa.Array) -> pa.Array:
    """Each properties string behind a separator, so every pair starts with one (`\x02k\x01v\x02`)."""
    return pc.binary_join_element_wise(_SEP, properties, "")


def transaction_rows(stored: pa.Table, group: str, transaction_id: str, last_offset: int) -> pa.RecordBatch:
    """The rows of half queue rows `stored` (STORED_SCHEMA) of `group`'s transaction `transaction_id`
    at offsets up to `last_offset`, in offset order."""
    if not stored.num_rows:
        return pa.RecordBatch.from_pylist([], schema=STORED_SCHEMA)
    batch = stored.combine_chunks().to_batches()[0]
    groups, transactions = property_values(batch.column("properties"), props.PRODUCER_GROUP, props.TRANSACTION_ID)
    keep = pc.and_(
        pc.and_(pc.equal(groups, group), pc.equal(transactions, transaction_id)),
        pc.less_equal(batch.column("queue_offset"), last_offset),
    )
    return batch.filter(pc.fill_null(keep, False))


def real_topics(rows: pa.RecordBatch) -> list[str]:
    """The real topics half message rows commit to."""
    (topics,) = property_values(rows.column("properties"), props.REAL_TOPIC)
    return [str(t) for t in pc.unique(topics).to_pylist() if t is not None]


@dataclass(frozen=True)
class CommitRun:
    """Rows that commit to one real queue as one producer batch (`put_arrow`'s arguments)."""

    topic: str
    queue_id: int
    batch: pa.RecordBatch  # PRODUCER_SCHEMA
    properties: pa.StringArray
    born_timestamp: int
    born_host: str
    fields: StandardBatchFields
    half_offsets: list[int]  # of the half messages it commits


def commit_runs(batch: pa.RecordBatch) -> Iterator[CommitRun]:
    """The commits of half message rows (STORED_SCHEMA, offset order): per real queue in the order of
    its first row, each queue's rows in offset order, cut where a stored batch's shared fields change."""
    if not batch.num_rows:
        return
    topics, queue_ids, uniq_keys = property_values(
        batch.column("properties"), props.REAL_TOPIC, props.REAL_QUEUE_ID, props.UNIQ_KEY
    )
    if topics.null_count or queue_ids.null_count:
        raise ValueError("a half message of the range names no real topic and queue")
    prefixed = _prefixed(batch.column("properties"))
    kept = pc.utf8_slice_codeunits(pc.replace_substring_regex(prefixed, _DROP_PATTERN, ""), 1)
    offsets = pc.cast(batch.column("queue_offset"), pa.string())
    committed = pc.binary_join_element_wise(kept, f"{props.TRANSACTION_PREPARED_QUEUE_OFFSET}{_EQ}", offsets, _SEP, "")
    destinations = pc.binary_join_element_wise(topics, queue_ids, _EQ).dictionary_encode()
    codes = destinations.indices.to_numpy(zero_copy_only=False)
    _, first_rows = np.unique(codes, return_index=True)
    shared = [batch.column(name).to_numpy() for name in ("born_timestamp", "sys_flag", "reconsume_times")]
    hosts = batch.column("born_host").dictionary_encode().indices.to_numpy(zero_copy_only=False)
    for code in codes[np.sort(first_rows)]:
        mine = np.flatnonzero(codes == code)
        keys = np.stack([column[mine] for column in (*shared, hosts)])
        cuts = np.flatnonzero((keys[:, 1:] != keys[:, :-1]).any(axis=0)) + 1
        for run in np.split(mine, cuts):
            yield _run(batch, run, topics, queue_ids, committed, uniq_keys)


def _run(
    rows: pa.RecordBatch, run: np.ndarray, topics: pa.Array, queue_ids: pa.Array, committed: pa.Array, uniq: pa.Array
) -> CommitRun:
    take = pa.array(run)
    first = int(run[0])
    n = len(run)
    batch = pa.RecordBatch.from_arrays(
        [
            rows.column("body").take(take),
            rows.column("tags").take(take),
            rows.column("keys").take(take),
            uniq.take(take),
            pa.nulls(n, PRODUCER_SCHEMA.field("properties").type),
        ],
        schema=PRODUCER_SCHEMA,
    )
    sys_flag = int(rows.column("sys_flag")[first].as_py())
    fields = StandardBatchFields(
        flags=rows.column("flag").take(take).to_numpy().astype(np.int32),
        sys_flag=(sys_flag & ~sysflag.TRANSACTION_TYPE_MASK) | sysflag.TRANSACTION_COMMIT_TYPE,
        reconsume_times=int(rows.column("reconsume_times")[first].as_py()),
        wait_flush=True,
    )
    return CommitRun(
        topic=str(topics[first].as_py()),
        queue_id=int(queue_ids[first].as_py()),
        batch=batch,
        properties=committed.take(take),
        born_timestamp=int(rows.column("born_timestamp")[first].as_py()),
        born_host=str(rows.column("born_host")[first].as_py()),
        fields=fields,
        half_offsets=rows.column("queue_offset").take(take).to_pylist(),
    )


@dataclass(frozen=True, slots=True)
class HalfBatch:
    """A batch of half messages as stored: half-queue offsets `first`.. (`count` rows) of `group`'s
    transaction `transaction_id` for `topic`/`queue_id`, each row's properties its own followed by
    `suffix` (UTF-8); a commit of a row keeps `kept` of that suffix."""

    first: int
    count: int
    group: str
    transaction_id: str
    topic: str
    queue_id: int
    born_timestamp: int
    suffix: bytes
    kept: str
    #: CHECK_IMMUNITY_TIME_IN_SECONDS of its rows (-1: transactionTimeOut), None without
    immunity_s: int | None = None

    @property
    def end(self) -> int:
        return self.first + self.count

    def immune(self, now_ms: int, timeout_ms: int) -> bool:
        """Whether the check passes every row of it now (born less than their immunity ago)."""
        if self.immunity_s is None:
            return False
        immunity_ms = timeout_ms if self.immunity_s == -1 else self.immunity_s * 1000
        return now_ms - self.born_timestamp < immunity_ms


class HalfBatches:
    """The batches of half messages stored since the broker started, by offset (event loop)."""

    def __init__(self) -> None:
        self._batches: list[HalfBatch] = []  # by first offset

    def __len__(self) -> int:
        return len(self._batches)

    def add(self, batch: HalfBatch) -> None:
        index = bisect.bisect(self._batches, batch.first, key=lambda known: known.first)
        self._batches.insert(index, batch)

    def between(self, start: int, stop: int) -> list[HalfBatch]:
        """The batches with rows at offsets in [start, stop), by offset."""
        index = bisect.bisect(self._batches, start, key=lambda known: known.first)
        if index and self._batches[index - 1].end > start:
            index -= 1
        found = []
        while index < len(self._batches) and self._batches[index].first < stop:
            found.append(self._batches[index])
            index += 1
        return found

    def immune_end(self, offset: int, now_ms: int, timeout_ms: int) -> int | None:
        """The end of the remembered batch holding `offset`, if the check passes all of it now."""
        index = bisect.bisect(self._batches, offset, key=lambda known: known.first) - 1
        if index < 0:
            return None
        batch = self._batches[index]
        return batch.end if offset < batch.end and batch.immune(now_ms, timeout_ms) else None

    def forget_below(self, offset: int) -> None:
        """Forget the batches wholly below `offset` (every half message below it ended)."""
        keep = bisect.bisect(self._batches, offset, key=lambda known: known.first)
        if keep and any(batch.end > offset for batch in self._batches[:keep]):
            self._batches = [batch for batch in self._batches if batch.end > offset]
        else:
            del self._batches[:keep]


def batch_commit(rows: pa.RecordBatch, batch: HalfBatch) -> CommitRun:
    """The commit of rows of a remembered batch of half messages (STORED_SCHEMA, consecutive)."""
    n = rows.num_rows
    own = pc.binary_slice(rows.column("properties").cast(pa.binary()), 0, -len(batch.suffix)).cast(pa.string())
    offsets = pc.cast(rows.column("queue_offset"), pa.string())
    committed = pc.binary_join_element_wise(
        own, f"{batch.kept}{props.TRANSACTION_PREPARED_QUEUE_OFFSET}{_EQ}", offsets, _SEP, ""
    )
    producer_rows = pa.RecordBatch.from_arrays(
        [
            rows.column("body"),
            rows.column("tags"),
            rows.column("keys"),
            rows.column("msg_id"),  # its UNIQ_KEY: a batch of half messages has one in every row
            pa.nulls(n, PRODUCER_SCHEMA.field("properties").type),
        ],
        schema=PRODUCER_SCHEMA,
    )
    fields = StandardBatchFields(
        flags=np.zeros(n, dtype=np.int32), sys_flag=sysflag.TRANSACTION_COMMIT_TYPE, reconsume_times=0, wait_flush=True
    )
    born_host = str(rows.column("born_host")[0].as_py())
    offsets_list = rows.column("queue_offset").to_pylist()
    return CommitRun(
        batch.topic, batch.queue_id, producer_rows, committed, batch.born_timestamp, born_host, fields, offsets_list
    )


@dataclass(frozen=True)
class RangeStep:
    """A step of a range end: the transaction's rows among some consecutive half-queue offsets, of
    a remembered batch (`batch`) or picked by their properties."""

    rows: pa.RecordBatch  # STORED_SCHEMA, offset order
    offsets: list[int]
    topics: list[str]  # the real topics they commit to
    batch: HalfBatch | None = None

    @classmethod
    def of_batch(cls, table: pa.Table, batch: HalfBatch) -> RangeStep:
        rows = table.combine_chunks().to_batches()[0]
        return cls(rows, rows.column("queue_offset").to_pylist(), [batch.topic], batch)

    @classmethod
    def of_rows(cls, rows: pa.RecordBatch) -> RangeStep:
        return cls(rows, rows.column("queue_offset").to_pylist(), real_topics(rows) if rows.num_rows else [])

    def commits(self, rows: pa.RecordBatch) -> list[CommitRun]:
        """The commits of `rows` (the step's, or those of them not ended yet)."""
        if not rows.num_rows:
            return []
        return [batch_commit(rows, self.batch)] if self.batch is not None else list(commit_runs(rows))


def encode_runs(offsets: Sequence[int] | np.ndarray) -> str:
    """Ascending offsets as runs: `12-40,45`."""
    values = np.asarray(offsets, dtype=np.int64)
    if not len(values):
        return ""
    cuts = np.flatnonzero(np.diff(values) != 1) + 1
    parts = []
    for run in np.split(values, cuts):
        start, end = int(run[0]), int(run[-1])
        parts.append(str(start) if start == end else f"{start}-{end}")
    return ",".join(parts)


def decode_runs(text: str) -> list[int] | None:
    """The offsets of :func:`encode_runs`' form (a lone offset, Apache's op body, included); None
    for text of another form."""
    offsets: list[int] = []
    for part in text.split(","):
        start, dash, end = part.partition("-")
        if not start.isdigit() or (dash and not end.isdigit()):
            return None
        first, last = int(start), int(end) if dash else int(start)
        if last < first:
            return None
        offsets.extend(range(first, last + 1))
    return offsets
