"""Dispatch: stored batches become consume queue entries and index entries.

The entries of the timer topic (rmq_sys_wheel_timer) carry their message's due time, its
TIMER_OUT_MS property, as their tag code, as Apache's entries of SCHEDULE_TOPIC_XXXX carry the
delivery time: the timer service (broker/schedule/timer_service.py) reads due times from the queue.

The store calls `dispatch` (Arrow batches, read back by recovery too) or `dispatch_sends` (commit
rounds of standard sends, from the values the sends carried: :class:`StandardSend`) once a batch is
written; arrival listeners hear of
every queue that grew. Index entries are built in bulk, every `_INDEX_BATCH_ROWS` rows and before a
flush or a lookup, because Arrow's fixed cost per call would dominate per batch. What waits for that
build is only what the index needs: the indexed columns of Arrow batches, and the keys and ids of
standard sends (never their records: a flood of large sends would wait in memory with them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker.store.config import StoreConfig
from broker.store.log.stored import StoredBatch, as_batches
from broker.store.queues.block_cache import BlockCache
from broker.store.queues.consume_queue import CQ_ENTRY, ConsumeQueue
from broker.store.queues.index import INDEXED_COLUMNS, IndexService, index_entries
from rocketspark.message.batches.columns import tag_code, tag_codes
from rocketspark.message.batches.schema import STORED_SCHEMA
from rocketspark.message.ids import offset_msg_id
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TIMER_TOPIC

#: called with (topic, queue id, new max offset, tag codes of the new messages) after every store
ArrivalListener = Callable[[str, int, int, np.ndarray], None]


class SentMessage(Protocol):
    """What dispatch reads of one message of a standard send."""

    @property
    def body(self) -> bytes: ...

    @property
    def tags(self) -> str | None: ...

    @property
    def keys(self) -> str | None: ...

    @property
    def uniq_key(self) -> str | None: ...

    @property
    def properties(self) -> str: ...


class StandardSend(Protocol):
    """A send of a written commit round as dispatch reads it: its queue, the messages it stored
    (None for a send of an Arrow batch, which a commit round of standard sends never holds) and the
    offsets of the first."""

    @property
    def topic(self) -> str: ...

    @property
    def queue_id(self) -> int: ...

    @property
    def count(self) -> int: ...

    @property
    def messages(self) -> Sequence[SentMessage] | None: ...

    @property
    def first_queue_offset(self) -> int: ...

    @property
    def first_commit_log_offset(self) -> int: ...


_INDEX_BATCH_ROWS = 50_000
_DUE_PATTERN = f"(?:^|{props.PROPERTY_SEPARATOR}){props.TIMER_OUT_MS}{props.NAME_VALUE_SEPARATOR}(?P<due>[0-9]{{1,18}})"


def due_code(properties: str) -> int:
    """The tag code of a timer topic entry: the message's TIMER_OUT_MS (0 when it has none)."""
    return int(props.decode_properties(properties).get(props.TIMER_OUT_MS) or 0)


def due_codes(properties: pa.Array) -> np.ndarray:
    """:func:`due_code` of many messages' properties at once."""
    due = pc.extract_regex(properties, _DUE_PATTERN).field("due")
    return np.asarray(pc.fill_null(pc.cast(due, pa.int64()), 0).to_numpy(zero_copy_only=False), dtype=np.int64)


#: what the index needs of a message of a standard send: topic, keys, msg id, commit log offset, store time
_SentRow = tuple[str, str | None, str, int, int]
_INDEXED_SCHEMA = pa.schema([STORED_SCHEMA.field(name) for name in INDEXED_COLUMNS])


class Dispatcher:
    """The consume queues and the key index, and how stored batches reach them (event loop)."""

    def __init__(self, config: StoreConfig, store_host: str) -> None:
        self._config = config
        self._store_host = store_host
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.index = IndexService(config.index_dir, config.index_slots_per_file)
        self._queue_blocks = BlockCache(config.consume_queue_cache_bytes)
        self._listeners: list[ArrivalListener] = []
        # batches whose index entries are not built yet: building them together saves the
        # fixed cost of the Arrow kernels per batch (the index serves lookups, not pulls)
        # in commit log order; consecutive standard sends of a segment share one list of their rows
        self._unindexed: list[tuple[int, StoredBatch | list[_SentRow]]] = []
        self._unindexed_rows = 0

    def load_queues(self) -> None:
        root = self._config.consume_queue_dir
        if not root.is_dir():
            return
        for topic_dir in root.iterdir():
            for queue_dir in topic_dir.iterdir():
                if queue_dir.name.isdigit():
                    queue = self.queue(topic_dir.name, int(queue_dir.name))
                    queue.load()

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            queue = ConsumeQueue(
                topic,
                queue_id,
                self._config.consume_queue_dir / topic / str(queue_id),
                self._config.consume_queue_entries_per_file,
                self._queue_blocks,
            )
            self.queues[(topic, queue_id)] = queue
        return queue

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        queue = self.queues.get((topic, queue_id))
        return queue.max_offset if queue is not None else 0

    def dispatch_sends(self, position: int, segment_start: int, store_ts: int, sends: Iterable[StandardSend]) -> None:
        """Add a commit round of standard sends, stored at `position` of the segment starting at
        `segment_start` at `store_ts`, to their consume queues and the index, from the values the
        sends carried (a few numpy calls per send: these rounds are small, and Arrow's fixed costs
        would dominate)."""
        rows = self._sent_rows(segment_start)
        for request in sends:
            if not request.count:
                continue
            assert request.messages is not None
            offset = request.first_commit_log_offset
            rows.extend(
                (
                    request.topic,
                    m.keys,
                    m.uniq_key or offset_msg_id(self._store_host, offset + i),
                    offset + i,
                    store_ts,
                )
                for i, m in enumerate(request.messages)
            )
            first_row = request.first_commit_log_offset - position
            code = due_code if request.topic == TIMER_TOPIC else None
            # one tuple per entry: for the few messages of a send, cheaper than a numpy call per field
            entries = np.array(
                [
                    (position, first_row + i, len(m.body), code(m.properties) if code else tag_code(m.tags), store_ts)
                    for i, m in enumerate(request.messages)
                ],
                dtype=CQ_ENTRY,
            )
            self._append_entries(request.topic, request.queue_id, request.first_queue_offset, entries)
            self._unindexed_rows += request.count
        if self._unindexed_rows >= _INDEX_BATCH_ROWS:
            self.build_index()

    def _append_entries(self, topic: str, queue_id: int, first_offset: int, entries: np.ndarray) -> None:
        queue = self.queue(topic, queue_id)
        queue.append(first_offset, entries)
        for listener in self._listeners:
            listener(topic, queue_id, queue.max_offset, entries["tags_code"])

    def dispatch(self, position: int, segment_start: int, batch: pa.RecordBatch) -> None:
        """Add a stored batch to its consume queues and the index (vectorized, per queue)."""
        topics = batch.column("topic").dictionary_encode()
        queue_ids = batch.column("queue_id").to_numpy()
        keys = topics.indices.to_numpy().astype(np.int64) << 32 | queue_ids.astype(np.int64)
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        boundaries = np.flatnonzero(np.diff(sorted_keys)) + 1
        codes = tag_codes(batch.column("tags"))
        sizes = pc.binary_length(batch.column("body")).to_numpy()
        store_ts = batch.column("store_timestamp").to_numpy()
        queue_offsets = batch.column("queue_offset").to_numpy()
        dictionary = topics.dictionary.to_pylist()
        for rows in np.split(order, boundaries):
            first = int(rows[0])
            topic = dictionary[int(keys[first] >> 32)]
            queue_id = int(queue_ids[first])
            entries = np.empty(len(rows), dtype=CQ_ENTRY)
            entries["batch_pos"] = position
            entries["row"] = rows
            entries["size"] = sizes[rows]
            if topic == TIMER_TOPIC:
                entries["tags_code"] = due_codes(batch.column("properties").take(pa.array(rows)))
            else:
                entries["tags_code"] = codes[rows]
            entries["store_ts"] = store_ts[rows]
            self._append_entries(topic, queue_id, int(queue_offsets[first]), entries)
        self._unindexed.append((segment_start, batch.select(INDEXED_COLUMNS)))
        self._unindexed_rows += batch.num_rows
        if self._unindexed_rows >= _INDEX_BATCH_ROWS:
            self.build_index()

    def _sent_rows(self, segment_start: int) -> list[_SentRow]:
        """The list the index rows of a round of standard sends in `segment_start` join."""
        if self._unindexed:
            last_segment, last = self._unindexed[-1]
            if last_segment == segment_start and isinstance(last, list):
                return last
        rows: list[_SentRow] = []
        self._unindexed.append((segment_start, rows))
        return rows

    def build_index(self) -> None:
        """Index the dispatched batches not indexed yet, one Arrow pass per segment."""
        pending, self._unindexed, self._unindexed_rows = self._unindexed, [], 0
        by_segment: dict[int, list[StoredBatch]] = {}
        for segment_start, item in pending:
            if isinstance(item, list) and not item:  # rounds of duplicates only
                continue
            batch = _index_columns(item) if isinstance(item, list) else item
            by_segment.setdefault(segment_start, []).append(batch)
        for segment_start, stored in by_segment.items():
            batches = [batch.select(INDEXED_COLUMNS) for batch in as_batches(stored)]
            combined = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
            self.index.add(segment_start, index_entries(combined))

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        self._listeners.append(listener)


def _index_columns(rows: list[_SentRow]) -> pa.RecordBatch:
    """The INDEXED_COLUMNS of standard sends' rows, in commit log order."""
    columns = zip(*rows, strict=True)
    return pa.RecordBatch.from_pydict(dict(zip(INDEXED_COLUMNS, columns, strict=True)), schema=_INDEXED_SCHEMA)
