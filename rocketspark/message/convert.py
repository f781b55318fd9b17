"""Conversions between the message batch schemas, a whole batch at a time.

The broker stores :data:`~rocketspark.message.schema.STORED_SCHEMA` batches built from producer
batches (:func:`stored_batch_from_producer`) or from messages that standard clients send one by one
(:func:`stored_batch_from_rows`); the Spark source turns them into
:data:`~rocketspark.message.schema.SPARK_SCHEMA` batches (:func:`to_spark_batch`).

Everything here works on whole columns with pyarrow compute kernels and numpy, never with a
Python loop over rows: batches carry thousands of messages, and a per-row loop would cost more
than the network. The only per-row Python left is decompressing the (rare) compressed bodies.

RocketMQ properties travel as one string per message, ``k\\x01v\\x02k\\x01v\\x02``
(:mod:`rocketspark.message.properties`). :func:`properties_to_map` and :func:`property_values` parse
a column of them by locating the separator bytes of the whole data buffer with numpy at once, then
cutting keys and values out of that buffer as Arrow arrays.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.message import ids, sysflag
from rocketspark.message import properties as props
from rocketspark.message.hashing import java_string_hash, java_string_hash_array
from rocketspark.message.schema import PRODUCER_SCHEMA, SPARK_SCHEMA, SPARK_TIMESTAMP, STORED_SCHEMA
from rocketspark.message.validation import validate_properties_length

#: map<string not null, string not null>: properties as PRODUCER_SCHEMA and SPARK_SCHEMA hold them.
PROPERTIES_MAP = SPARK_SCHEMA.field("properties").type

_NAME_VALUE = ord(props.NAME_VALUE_SEPARATOR)
_PROPERTY_END = ord(props.PROPERTY_SEPARATOR)
_COMPRESSION_NAMES = {sysflag.COMPRESSION_LZ4: "LZ4", sysflag.COMPRESSION_ZSTD: "ZSTD"}


# ---------------------------------------------------------------------------------------------
# Arrow buffers


def offsets_and_buffer(array: pa.Array) -> tuple[np.ndarray, pa.Buffer]:
    """(int64 offsets of each value into the data buffer, n + 1 of them; the data buffer).

    For binary and string arrays (32-bit offsets). The offsets account for slicing, so value i
    is ``buffer[offsets[i]:offsets[i + 1]]``.
    """
    n = len(array)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=n + 1, offset=array.offset * 4)
    data = array.buffers()[2]
    return offsets.astype(np.int64), data if data is not None else pa.py_buffer(b"")


def binary_from_ranges(
    buffer: pa.Buffer, starts: np.ndarray, ends: np.ndarray, type_: pa.DataType, null: np.ndarray | None = None
) -> pa.Array:
    """The byte ranges ``buffer[starts[i]:ends[i]]`` as a new binary or string array.

    The ranges must be in ascending order and must not overlap. The buffer is viewed as an array
    whose values alternate between the wanted ranges and the gaps between them; taking the even
    values copies the ranges with one memcpy each. Values are null where the boolean array `null`
    is true (their ranges must keep the order all the same). Strings are not checked for valid
    UTF-8: call ``validate(full=True)`` on the result when the bytes come from outside.
    """
    n = len(starts)
    if n == 0:
        return pa.array([], type_)
    bounds = np.empty(2 * n, dtype=np.int64)
    bounds[0::2] = starts
    bounds[1::2] = ends
    spread_type = pa.large_string() if pa.types.is_string(type_) else pa.large_binary()
    spread = pa.Array.from_buffers(spread_type, 2 * n - 1, [None, pa.py_buffer(bounds), buffer])
    return spread.take(pa.array(np.arange(0, 2 * n - 1, 2), mask=null)).cast(type_)


# ---------------------------------------------------------------------------------------------
# properties


class _Pairs(NamedTuple):
    """Where the property pairs of a column are, in row order, as byte positions in its buffer.

    The key of pair j is ``buffer[starts[j]:splits[j]]``, its value ``buffer[splits[j] + 1:ends[j]]``;
    the pairs of row i are ``row_offsets[i]:row_offsets[i + 1]``, its string
    ``buffer[offsets[i]:offsets[i + 1]]``.
    """

    buffer: pa.Buffer
    offsets: np.ndarray
    row_offsets: np.ndarray
    starts: np.ndarray
    splits: np.ndarray
    ends: np.ndarray

    def rows(self) -> np.ndarray:
        """The row of each pair."""
        return np.repeat(np.arange(len(self.row_offsets) - 1), np.diff(self.row_offsets))

    def keys(self) -> pa.Array:
        return binary_from_ranges(self.buffer, self.starts, self.splits, pa.string())

    def values(self) -> pa.Array:
        return binary_from_ranges(self.buffer, self.splits + 1, self.ends, pa.string())


def _property_pairs(properties: pa.Array) -> _Pairs:
    """Split a column of property strings into pairs, as :func:`properties.decode_properties` does.

    A pair ends at 0x02 or at the end of its string; its key is what precedes its first 0x01;
    pairs without 0x01 are skipped. The separator bytes of all rows are found in one pass over
    the data buffer. Because the rows lie back to back in that buffer and every row's last pair
    is terminated (by its 0x02, or by a zero-width terminator added at its end), a pair always
    starts right after the previous terminator, whichever row that belonged to.
    """
    column = pc.fill_null(properties.cast(pa.string()), "")
    offsets, buffer = offsets_and_buffer(column)
    data = np.frombuffer(buffer, dtype=np.uint8)
    low = int(offsets[0])
    window = data[low : int(offsets[-1])]
    events = np.flatnonzero((window - np.uint8(_NAME_VALUE)) < 2) + low  # positions of 0x01 and 0x02
    is_end = data[events] == _PROPERTY_END
    width = np.ones(len(events), dtype=np.int64)  # bytes a terminator takes
    non_empty = np.flatnonzero(np.diff(offsets) > 0)
    open_rows = non_empty[data[offsets[non_empty + 1] - 1] != _PROPERTY_END]
    if len(open_rows):
        virtual = offsets[open_rows + 1]
        # before a separator at the same position, which belongs to the next row
        order = np.argsort(np.concatenate([2 * events + 1, 2 * virtual]), kind="stable")
        events = np.concatenate([events, virtual])[order]
        is_end = np.concatenate([is_end, np.ones(len(virtual), dtype=bool)])[order]
        width = np.concatenate([width, np.zeros(len(virtual), dtype=np.int64)])[order]
    ends = np.flatnonzero(is_end)  # the terminator of each pair, as an index into events
    first_event = np.zeros_like(ends)  # the first separator of each pair
    first_event[1:] = ends[:-1] + 1
    starts = np.full_like(ends, low)
    starts[1:] = events[ends[:-1]] + width[ends[:-1]]
    has_key = first_event < ends  # the pair's first separator is a 0x01
    starts, ends = starts[has_key], ends[has_key]
    last_byte = events[ends] - 1 + width[ends]  # of the pair and its terminator, inside its row
    return _Pairs(
        buffer, offsets, np.searchsorted(last_byte, offsets), starts, events[first_event[has_key]], events[ends]
    )


def properties_to_map(properties: pa.Array) -> pa.MapArray:
    """A column of property strings as map<string, string> (null and "" give an empty map).

    Pairs keep their order; a key repeated in one string (which RocketMQ never writes) stays
    repeated in the map.
    """
    pairs = _property_pairs(properties)
    offsets = pa.array(pairs.row_offsets.astype(np.int32))
    return pa.MapArray.from_arrays(offsets, pairs.keys(), pairs.values(), type=PROPERTIES_MAP)


def property_values(properties: pa.Array, *names: str) -> list[pa.Array]:
    """For each name, a string column of that property's value per row (null where absent).

    A repeated key yields its last value, as Java's and :func:`properties.decode_properties`'s
    maps do.
    """
    pairs = _property_pairs(properties)
    rows = pairs.rows()
    keys = pairs.keys()
    result = []
    for name in names:
        hits = np.flatnonzero(pc.equal(keys, name).to_numpy(zero_copy_only=False))
        hit_rows = rows[hits]
        last = np.ones(len(hits), dtype=bool)  # the last hit of each row
        last[:-1] = hit_rows[1:] != hit_rows[:-1]
        hits, hit_rows = hits[last], hit_rows[last]
        # rows without the property get an empty range at their start, keeping the ranges in order
        starts = pairs.offsets[:-1].copy()
        ends = starts.copy()
        starts[hit_rows] = pairs.splits[hits] + 1
        ends[hit_rows] = pairs.ends[hits]
        missing = np.ones(len(starts), dtype=bool)
        missing[hit_rows] = False
        result.append(binary_from_ranges(pairs.buffer, starts, ends, pa.string(), missing))
    return result


def map_to_properties(user: pa.MapArray) -> pa.StringArray:
    """Inverse of :func:`properties_to_map`: each map as a property string (null gives "")."""
    entries = pc.binary_join_element_wise(
        user.keys.cast(pa.string()),
        props.NAME_VALUE_SEPARATOR,
        user.items.cast(pa.string()),
        props.PROPERTY_SEPARATOR,
        "",
    )
    mask = user.is_null() if user.null_count else None
    joined = pc.binary_join(pa.ListArray.from_arrays(_unsliced_offsets(user), entries, mask=mask), "")
    if joined.null_count != user.null_count:
        raise ValueError("property values must not be null")
    return pc.fill_null(joined, "")


def _unsliced_offsets(array: pa.MapArray) -> pa.Array:
    """The offsets of a (possibly sliced) map array, copied: pyarrow takes no mask with sliced offsets."""
    return pa.array(array.offsets.to_numpy())


def encode_properties_column(
    user: pa.MapArray | None, *, tags: pa.Array, keys: pa.Array, uniq_key: pa.Array
) -> pa.StringArray:
    """The properties string of each message, as producers send it.

    It holds the user properties, then TAGS, KEYS and UNIQ_KEY where those are not null. Raises
    ValidationError (a ValueError) if one exceeds the 32767 bytes a record can hold.
    """
    parts = [] if user is None else [map_to_properties(user)]
    for name, column in ((props.TAGS, tags), (props.KEYS, keys), (props.UNIQ_KEY, uniq_key)):
        part = pc.binary_join_element_wise(
            name + props.NAME_VALUE_SEPARATOR, column.cast(pa.string()), props.PROPERTY_SEPARATOR, ""
        )
        parts.append(pc.fill_null(part, ""))
    encoded = pc.binary_join_element_wise(*parts, "")
    _check_properties_length(encoded)
    return encoded


def _check_properties_length(encoded: pa.Array) -> None:
    if len(encoded) == 0:
        return
    lengths = pc.binary_length(encoded).to_numpy(zero_copy_only=False)
    too_long = np.flatnonzero(lengths > props.MAX_PROPERTIES_LENGTH)
    if len(too_long):
        row = int(too_long[0])
        validate_properties_length(int(lengths[row]), message=row)


# ---------------------------------------------------------------------------------------------
# ids, tag codes, bodies


def message_ids(uniq_keys: pa.Array, offset_msg_ids: Callable[[np.ndarray], pa.Array]) -> pa.Array:
    """Java's `MessageClientExt.getMsgId` per row: the producer's UNIQ_KEY, else the offset msgId.

    `offset_msg_ids(rows)` gives the offset msgIds of the rows at those indices; it is only asked
    for the rows without a UNIQ_KEY, which standard clients always set.
    """
    missing = uniq_keys.is_null().to_numpy(zero_copy_only=False)
    if not missing.any():
        return uniq_keys
    return pc.replace_with_mask(uniq_keys, pa.array(missing), offset_msg_ids(np.flatnonzero(missing)))


#: below this many rows, per-row Python beats the fixed cost of Arrow kernels
_SMALL_BATCH = 32


def tag_codes(tags: pa.Array) -> np.ndarray:
    """The consume-queue tag code of each row: Java's `String.hashCode` of the tags, 0 for none."""
    if tags.null_count == len(tags):
        return np.zeros(len(tags), dtype=np.int64)
    if len(tags) <= _SMALL_BATCH:  # Arrow kernels cost more than they save for a few rows
        return np.array([_tag_code(tag) for tag in tags.to_pylist()], dtype=np.int64)
    return java_string_hash_array(tags)


@functools.lru_cache(maxsize=1024)  # a topic uses few distinct tags
def _tag_code(tag: str | None) -> int:
    return java_string_hash(tag) if tag else 0


def decompress_bodies(bodies: pa.Array, sys_flags: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """(bodies with the compressed ones inflated, sys flags with their COMPRESSED bit cleared).

    4.x flags zlib with the COMPRESSED bit alone, 5.x adds the compression type bits; Java
    producers only ever use zlib by default. LZ4 and ZSTD raise ValueError, as does corrupt data.
    """
    compressed = np.flatnonzero(sys_flags & sysflag.COMPRESSED)
    if len(compressed) == 0:
        return bodies, sys_flags
    kinds = sys_flags[compressed] & sysflag.COMPRESSION_TYPE_MASK
    unsupported = np.flatnonzero((kinds != 0) & (kinds != sysflag.COMPRESSION_ZLIB))
    if len(unsupported):
        row, kind = int(compressed[unsupported[0]]), int(kinds[unsupported[0]])
        name = _COMPRESSION_NAMES.get(kind, f"unknown type 0x{kind:x}")
        raise ValueError(f"message {row} is compressed with {name}; only zlib bodies can be decompressed")
    try:
        plain = [zlib.decompress(body) for body in bodies.take(pa.array(compressed)).to_pylist()]
    except zlib.error as exc:
        raise ValueError(f"a zlib-compressed body does not decompress: {exc}") from None
    mask = np.zeros(len(bodies), dtype=bool)
    mask[compressed] = True
    flags = sys_flags.copy()
    flags[compressed] &= ~sysflag.COMPRESSED
    return pc.replace_with_mask(bodies, pa.array(mask), pa.array(plain, pa.binary())), flags


# ---------------------------------------------------------------------------------------------
# Spark


def _require_schema(batch: pa.RecordBatch, schema: pa.Schema, name: str) -> None:
    if not batch.schema.equals(schema):
        raise ValueError(f"expected a batch with {name}, got:\n{batch.schema}")


def to_spark_batch(stored: pa.RecordBatch, broker_name: str) -> pa.RecordBatch:
    """A STORED_SCHEMA batch as the Spark source yields it (SPARK_SCHEMA).

    Bodies are decompressed here: SPARK_SCHEMA has no sys flag, so a compressed body could not be
    told apart downstream.
    """
    _require_schema(stored, STORED_SCHEMA, "STORED_SCHEMA")
    bodies, _ = decompress_bodies(stored.column("body"), stored.column("sys_flag").to_numpy())
    columns = {
        "topic": stored.column("topic"),
        "brokerName": pa.repeat(pa.scalar(broker_name, pa.string()), stored.num_rows),
        "queueId": stored.column("queue_id"),
        "queueOffset": stored.column("queue_offset"),
        "msgId": stored.column("msg_id"),
        "tags": stored.column("tags"),
        "keys": stored.column("keys"),
        "body": bodies,
        "bornTimestamp": pc.multiply_checked(stored.column("born_timestamp"), 1000).cast(SPARK_TIMESTAMP),
        "storeTimestamp": pc.multiply_checked(stored.column("store_timestamp"), 1000).cast(SPARK_TIMESTAMP),
        "bornHost": stored.column("born_host"),
        "reconsumeTimes": stored.column("reconsume_times"),
        "properties": properties_to_map(stored.column("properties")),
    }
    return pa.RecordBatch.from_arrays([columns[name] for name in SPARK_SCHEMA.names], schema=SPARK_SCHEMA)


# ---------------------------------------------------------------------------------------------
# producer batches

_STRING_COLUMNS = ("tags", "keys", "uniq_key")


def producer_batch(data: Any) -> pa.RecordBatch:
    """Normalise what a user hands the Arrow producer to a PRODUCER_SCHEMA batch.

    `data` is a pyarrow RecordBatch or Table or a pandas DataFrame with a `body` column
    (binary, or strings sent as UTF-8) and optionally `tags`, `keys`, `uniq_key` (strings; "" counts
    as absent, as Java readers drop empty properties) and `properties` (a map of strings, a struct
    of strings, or in pandas a column of dicts). Missing optional columns become nulls.
    """
    table = _as_table(data)
    unknown = [name for name in table.column_names if name not in PRODUCER_SCHEMA.names]
    if unknown or "body" not in table.column_names:
        raise ValueError(
            f"a producer batch has the columns {', '.join(PRODUCER_SCHEMA.names)} (body required); "
            f"got {', '.join(table.column_names) or 'none'}"
        )
    n = table.num_rows
    columns = {name: table.column(name).combine_chunks() for name in table.column_names}
    arrays = [_body_column(columns["body"])]
    for name in _STRING_COLUMNS:
        arrays.append(_string_column(columns[name], name) if name in columns else pa.nulls(n, pa.string()))
    user = columns.get("properties")
    arrays.append(pa.nulls(n, PROPERTIES_MAP) if user is None else _properties_column(user))
    return pa.RecordBatch.from_arrays(arrays, schema=PRODUCER_SCHEMA)


def _as_table(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    import pandas as pd  # noqa: PLC0415  # on demand: it takes long to import and most callers pass Arrow

    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"expected a pyarrow RecordBatch or Table or a pandas DataFrame, got {type(data).__name__}")
    arrays, names = [], []
    for name in data.columns:
        # dicts become maps, not the structs pyarrow would infer
        type_ = pa.map_(pa.string(), pa.string()) if name == "properties" else None
        try:
            arrays.append(pa.array(data[name], type=type_, from_pandas=True))
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise ValueError(f"column {name!r} does not convert to Arrow: {exc}") from None
        names.append(str(name))
    return pa.Table.from_arrays(arrays, names=names)


def _body_column(body: pa.Array) -> pa.Array:
    if pa.types.is_null(body.type):  # an empty or all-None pandas column
        body = body.cast(pa.binary())
    if not (pa.types.is_binary(body.type) or pa.types.is_large_binary(body.type) or _is_string(body.type)):
        raise ValueError(f"body must be binary or string, not {body.type}")
    if body.null_count:
        raise ValueError(f"body must not be null (row {_first_null(body)})")
    return body.cast(pa.binary())


def _is_string(type_: pa.DataType) -> bool:
    return bool(pa.types.is_string(type_) or pa.types.is_large_string(type_))


def _first_null(array: pa.Array) -> int:
    return int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])


def _string_column(column: pa.Array, name: str) -> pa.Array:
    try:
        strings = column.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"column {name!r} must hold strings, not {column.type}: {exc}") from None
    return pc.if_else(pc.equal(strings, ""), pa.scalar(None, pa.string()), strings)


def _properties_column(column: pa.Array) -> pa.MapArray:
    try:
        if pa.types.is_null(column.type):  # what pandas gives for a column of None
            return pa.nulls(len(column), PROPERTIES_MAP)
        if pa.types.is_map(column.type):
            offsets, keys, values = _unsliced_offsets(column), column.keys, column.items
        elif pa.types.is_struct(column.type):
            offsets, keys, values = _struct_entries(column)
        else:
            raise ValueError(f"properties must be a map or struct of strings, not {column.type}")
        keys, values = keys.cast(pa.string()), values.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"property keys and values must be strings: {exc}") from None
    mask = column.is_null() if column.null_count else None
    result = pa.MapArray.from_arrays(offsets, keys, values, type=PROPERTIES_MAP, mask=mask)
    first, last = result.offsets[0].as_py(), result.offsets[-1].as_py()
    used_keys, used_values = result.keys.slice(first, last - first), result.items.slice(first, last - first)
    if used_values.null_count:
        raise ValueError("property values must not be null")
    reserved = used_keys.filter(pc.is_in(used_keys, pa.array(sorted(props.SYSTEM_KEYS))))
    if len(reserved):
        raise ValueError(
            f"properties may not use the system keys {sorted(set(reserved.to_pylist()))}; "
            "tags, keys and uniq_key have columns of their own"
        )
    return result


def _struct_entries(column: pa.StructArray) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(offsets, keys, values) of maps holding each row's non-null struct fields, in field order."""
    rows = [np.empty(0, dtype=np.int64)]
    keys = [pa.array([], pa.string())]
    values = [pa.array([], pa.string())]
    for field, child in zip(column.type, column.flatten(), strict=True):  # flatten: sliced, null in null rows
        valid = child.is_valid()
        rows.append(np.flatnonzero(valid.to_numpy(zero_copy_only=False)))
        keys.append(pa.repeat(pa.scalar(field.name, pa.string()), len(rows[-1])))
        values.append(child.filter(valid).cast(pa.string()))
    all_rows = np.concatenate(rows)
    order = np.argsort(all_rows, kind="stable")
    offsets = np.searchsorted(all_rows[order], np.arange(len(column) + 1)).astype(np.int32)
    return pa.array(offsets), pa.concat_arrays(keys).take(order), pa.concat_arrays(values).take(order)


# ---------------------------------------------------------------------------------------------
# stored batches


def stored_batch_from_producer(
    batch: pa.RecordBatch,
    *,
    topic: str,
    queue_id: int,
    first_queue_offset: int,
    first_commit_log_offset: int,
    born_timestamp: int,
    born_host: str,
    store_timestamp: int,
    store_host: str,
    flag: int = 0,
    sys_flag: int = 0,
    properties: pa.StringArray | None = None,
) -> pa.RecordBatch:
    """The STORED_SCHEMA batch the broker keeps for a PRODUCER_SCHEMA batch written to one queue.

    `properties` is the batch's :func:`encode_properties_column`, when the caller already built it.
    """
    _require_schema(batch, PRODUCER_SCHEMA, "PRODUCER_SCHEMA")
    n = batch.num_rows
    tags, keys, uniq_key = (batch.column(name) for name in _STRING_COLUMNS)
    if properties is None:
        properties = encode_properties_column(batch.column("properties"), tags=tags, keys=keys, uniq_key=uniq_key)
    return _stored_batch(
        first_commit_log_offset=first_commit_log_offset,
        store_host=store_host,
        uniq_key=uniq_key,
        columns={
            "topic": pa.repeat(pa.scalar(topic, pa.string()), n),
            "queue_id": np.full(n, queue_id, dtype=np.int32),
            "queue_offset": np.arange(first_queue_offset, first_queue_offset + n, dtype=np.int64),
            "tags": tags,
            "keys": keys,
            "body": batch.column("body"),
            "flag": np.full(n, flag, dtype=np.int32),
            "sys_flag": np.full(n, sys_flag, dtype=np.int32),
            "born_timestamp": np.full(n, born_timestamp, dtype=np.int64),
            "born_host": pa.repeat(pa.scalar(born_host, pa.string()), n),
            "store_timestamp": np.full(n, store_timestamp, dtype=np.int64),
            "reconsume_times": np.zeros(n, dtype=np.int32),
            "properties": properties,
        },
    )


def stored_batch_from_rows(
    *,
    topics: Sequence[str],
    queue_ids: Sequence[int],
    queue_offsets: Sequence[int],
    first_commit_log_offset: int,
    store_timestamp: int,
    store_host: str,
    bodies: Sequence[bytes],
    properties: Sequence[str],
    tags: Sequence[str | None],
    keys: Sequence[str | None],
    uniq_keys: Sequence[str | None],
    flags: Sequence[int],
    sys_flags: Sequence[int],
    born_timestamps: Sequence[int],
    born_hosts: Sequence[str],
    reconsume_times: Sequence[int],
) -> pa.RecordBatch:
    """The STORED_SCHEMA batch for messages that standard clients sent (SEND_MESSAGE, batch bodies).

    Each sequence has one value per message, which may belong to different queues; they take
    consecutive commit log offsets. `properties` are the encoded strings the clients sent; the
    broker already parsed them one message at a time, so tags, keys and UNIQ_KEY come along as
    values (rebuilding them here with Arrow kernels costs more than it saves for small rounds).
    """
    encoded = pa.array(properties, pa.string())
    return _stored_batch(
        first_commit_log_offset=first_commit_log_offset,
        store_host=store_host,
        uniq_key=pa.array(uniq_keys, pa.string()),
        columns={
            "topic": pa.array(topics, pa.string()),
            "queue_id": np.asarray(queue_ids, dtype=np.int32),
            "queue_offset": np.asarray(queue_offsets, dtype=np.int64),
            "tags": pa.array(tags, pa.string()),
            "keys": pa.array(keys, pa.string()),
            "body": pa.array(bodies, pa.binary()),
            "flag": np.asarray(flags, dtype=np.int32),
            "sys_flag": np.asarray(sys_flags, dtype=np.int32),
            "born_timestamp": np.asarray(born_timestamps, dtype=np.int64),
            "born_host": pa.array(born_hosts, pa.string()),
            "store_timestamp": np.full(len(encoded), store_timestamp, dtype=np.int64),
            "reconsume_times": np.asarray(reconsume_times, dtype=np.int32),
            "properties": encoded,
        },
    )


def _stored_batch(
    *,
    first_commit_log_offset: int,
    store_host: str,
    uniq_key: pa.Array,
    columns: Mapping[str, pa.Array | np.ndarray],
) -> pa.RecordBatch:
    """Add what the broker assigns last: consecutive commit log offsets and the msg ids."""
    commit_log_offsets = np.arange(first_commit_log_offset, first_commit_log_offset + len(uniq_key), dtype=np.int64)
    msg_ids = message_ids(uniq_key, lambda rows: ids.offset_msg_ids(store_host, commit_log_offsets[rows]))
    return stored_batch({**columns, "commit_log_offset": commit_log_offsets, "msg_id": msg_ids})


def stored_batch(columns: Mapping[str, pa.Array | np.ndarray]) -> pa.RecordBatch:
    """A STORED_SCHEMA batch from one array per column (numpy arrays are converted).

    Raises ValueError if a column the schema declares non-nullable holds nulls.
    """
    arrays = []
    for field in STORED_SCHEMA:
        column = columns[field.name]
        array = column if isinstance(column, pa.Array) else pa.array(column, field.type)
        if not field.nullable and array.null_count:
            raise ValueError(f"column {field.name!r} must not be null (row {_first_null(array)})")
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=STORED_SCHEMA)
