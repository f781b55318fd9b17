"""Turning the rows Spark hands the sink into producer batches, each bound for one destination.

All of it is Arrow compute over a whole batch: no Python work per row. A row goes to the queue its
`queueId` names (an index into the topic's writable queues, as a Java `MessageQueueSelector` picks
`mqs.get(id)`), else to the queue its `shardingKey` hashes to (as the client's sharding-key
selector, so one key keeps one queue), else, when the write sends deterministic ids
(:mod:`rocketspark.spark.sink.ids`), to the queue its id hashes to (so a replay sends it to the same
queue), else round robin. Rows with a delay level (the `delayLevel` column, else the option) go in
producer batches of their own, which the producer sends one message at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.errors import ValidationError
from rocketspark.message.batches.producer import producer_batch
from rocketspark.message.hashing import java_string_hash_array
from rocketspark.message.properties.codec import SYSTEM_KEYS
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.sink.ids import IdScope
from rocketspark.spark.sink.options import SinkOptions

_SYSTEM_KEYS = pa.array(sorted(SYSTEM_KEYS), pa.string())


@dataclass(frozen=True, slots=True)
class Outgoing:
    """Rows for one destination: a queue, or (queue None) the next queue round robin."""

    topic: str
    queue: MessageQueue | None
    batch: pa.RecordBatch  # PRODUCER_SCHEMA
    delay_level: int = 0


@dataclass(frozen=True, slots=True)
class RowPlace:
    """Where a task's rows start, for errors that name a row as a person can find it."""

    partition: int | None
    first_row: int

    def describe(self, index: int) -> str:
        where = f" of partition {self.partition}" if self.partition is not None else ""
        return f"row {self.first_row + index}{where}"


def _first(mask: pa.Array) -> int:
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])


def drop_system_properties(properties: pa.Array) -> pa.Array:
    """The map column without RocketMQ's own keys (TAGS, KEYS, UNIQ_KEY, WAIT, DELAY, …): a producer
    sets those from the message itself, and the source's `properties` column carries them."""
    bounds = properties.offsets.to_numpy(zero_copy_only=False)  # of this (maybe sliced) array's rows
    first, count = int(bounds[0]), int(bounds[-1] - bounds[0])
    if not count:
        return properties
    keys, values = properties.keys.slice(first, count), properties.items.slice(first, count)
    drop = pc.is_in(keys, value_set=_SYSTEM_KEYS)
    if not pc.any(drop).as_py():
        return properties
    keep = pc.invert(drop)
    sizes = np.diff(bounds)
    rows = np.repeat(np.arange(len(properties)), sizes)[keep.to_numpy(zero_copy_only=False)]
    offsets = np.zeros(len(properties) + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=len(properties)), out=offsets[1:])
    return pa.MapArray.from_arrays(
        pa.array(offsets), pc.filter(keys, keep), pc.filter(values, keep), mask=pc.is_null(properties)
    )


def _producer_rows(batch: pa.RecordBatch, place: RowPlace, max_body_size: int) -> pa.RecordBatch:
    body = batch.column("body")
    if body.null_count:
        raise ValidationError(f"{place.describe(_first(pc.is_null(body)))} has a null body; a message needs one")
    lengths = pc.binary_length(body)
    if pc.min(lengths).as_py() == 0:
        raise ValidationError(f"{place.describe(_first(pc.equal(lengths, 0)))} has an empty body; a message needs one")
    if pc.max(lengths).as_py() > max_body_size:
        index = _first(pc.greater(lengths, max_body_size))
        raise ValidationError(
            f"{place.describe(index)} has a body of {lengths[index].as_py():,} bytes, over the broker's maximum "
            f"message size of {max_body_size:,} bytes"
        )
    columns = {"body": body}
    for name in ("tags", "keys"):
        if name in batch.schema.names:
            column = batch.column(name)
            if pa.types.is_list(column.type):  # elements may be non-nullable, which binary_join refuses
                column = pc.binary_join(column.cast(pa.list_(pa.string())), " ")
            columns[name] = column
    if "properties" in batch.schema.names:
        columns["properties"] = drop_system_properties(batch.column("properties"))
    return producer_batch(pa.RecordBatch.from_pydict(columns))


def _targets(batch: pa.RecordBatch, queue_counts: np.ndarray, place: RowPlace) -> np.ndarray:
    """The index of each row's queue in its topic's writable queues (`queue_counts` of them); -1
    for round robin."""
    targets = np.full(batch.num_rows, -1, dtype=np.int64)
    if "shardingKey" in batch.schema.names:
        keys = batch.column("shardingKey")
        keyed = pc.is_valid(keys).to_numpy(zero_copy_only=False)
        targets[keyed] = np.abs(java_string_hash_array(keys)[keyed]) % queue_counts[keyed]
    if "queueId" in batch.schema.names:
        ids = batch.column("queueId")
        chosen = pc.is_valid(ids).to_numpy(zero_copy_only=False)
        values = pc.fill_null(ids, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        wrong = chosen & ((values < 0) | (values >= queue_counts))
        if wrong.any():
            index = int(np.flatnonzero(wrong)[0])
            raise ValidationError(
                f"{place.describe(index)} has queueId {values[index]}; its topic has {queue_counts[index]} "
                f"writable queues (0..{queue_counts[index] - 1})"
            )
        targets[chosen] = values[chosen]
    return targets


def _delay_levels(batch: pa.RecordBatch, default: int, place: RowPlace) -> np.ndarray:
    """Each row's delay level: its `delayLevel`, or `default` where that is null or missing."""
    levels = np.full(batch.num_rows, default, dtype=np.int64)
    if "delayLevel" in batch.schema.names:
        column = batch.column("delayLevel")
        given = pc.is_valid(column).to_numpy(zero_copy_only=False)
        values = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        negative = given & (values < 0)
        if negative.any():
            index = int(np.flatnonzero(negative)[0])
            raise ValidationError(f"{place.describe(index)} has delayLevel {values[index]}; 0 (none) or more")
        levels[given] = values[given]
    return levels


def _chunks(
    topic: str, queue: MessageQueue | None, rows: pa.RecordBatch, size: int, delay_level: int
) -> list[Outgoing]:
    return [Outgoing(topic, queue, rows.slice(start, size), delay_level) for start in range(0, rows.num_rows, size)]


def split_batch(
    batch: pa.RecordBatch,
    options: SinkOptions,
    place: RowPlace,
    queues_of: Callable[[str], list[MessageQueue]],
    max_body_size: int,
    ids: IdScope | None = None,
) -> list[Outgoing]:
    """The batch's rows as producer batches of at most `batchSize` rows, each for one destination,
    in the rows' order within each destination; with `ids`, each row carries its deterministic id."""
    rows = _producer_rows(batch, place, max_body_size)
    if options.topic is not None:
        row_topics = {options.topic: np.arange(batch.num_rows)}
        topic_column = pa.repeat(pa.scalar(options.topic, pa.string()), batch.num_rows)
    else:
        column = batch.column("topic")
        if column.null_count:
            raise ValidationError(f"{place.describe(_first(pc.is_null(column)))} has a null topic")
        names = column.to_numpy(zero_copy_only=False)
        row_topics = {str(t): np.flatnonzero(names == t) for t in pc.unique(column).to_pylist()}
        topic_column = column
    id_hashes = None
    if ids is not None:
        uniq, id_hashes = ids.ids(rows, topic_column)
        rows = rows.set_column(rows.schema.get_field_index("uniq_key"), rows.schema.field("uniq_key"), uniq)
    queues = {topic: queues_of(topic) for topic in row_topics}
    counts = np.empty(batch.num_rows, dtype=np.int64)
    for topic, indices in row_topics.items():
        counts[indices] = len(queues[topic])
    targets = _targets(batch, counts, place)
    if id_hashes is not None:
        by_id = targets < 0
        targets[by_id] = (id_hashes[by_id] % counts[by_id].astype(np.uint64)).astype(np.int64)
    levels = _delay_levels(batch, options.delay_level, place)
    outgoing: list[Outgoing] = []
    for topic, indices in row_topics.items():
        for group in _by_destination(targets[indices], levels[indices]):
            mine = indices[group]
            target, level = int(targets[mine[0]]), int(levels[mine[0]])
            chosen = rows if len(mine) == batch.num_rows else rows.take(pa.array(mine))
            queue = queues[topic][target] if target >= 0 else None  # -1: round robin
            outgoing += _chunks(topic, queue, chosen, options.batch_size, level)
    return outgoing


def _by_destination(targets: np.ndarray, levels: np.ndarray) -> list[np.ndarray]:
    """The positions of the rows of each (target, level) pair, ascending, the pairs in ascending order.

    One stable lexsort: `np.unique` of the rows of a pair array sorts them as opaque void values,
    which took half of a sink worker's time (bench/RESULTS.md)."""
    if not len(targets):
        return []
    if targets.min() == targets.max() and levels.min() == levels.max():  # the common case: one destination
        return [np.arange(len(targets))]
    order = np.lexsort((levels, targets))
    by_target, by_level = targets[order], levels[order]
    cuts = np.flatnonzero((by_target[1:] != by_target[:-1]) | (by_level[1:] != by_level[:-1])) + 1
    return np.split(order, cuts)
