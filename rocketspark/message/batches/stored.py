"""The STORED_SCHEMA batches the broker keeps, built a whole batch at a time.

The broker builds them from producer batches (:func:`stored_batch_from_producer`) or from messages
that standard clients send one by one (:func:`stored_batch_from_rows`); the record decoder from
the columns it read (:func:`stored_batch`). Everything here works on whole columns with pyarrow
and numpy, never with a Python loop over rows: batches carry thousands of messages, and a per-row
loop would cost more than the network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from rocketspark.message import ids
from rocketspark.message.batches.arrays import first_null, require_schema
from rocketspark.message.batches.columns import message_ids
from rocketspark.message.batches.schema import PRODUCER_SCHEMA, STORED_SCHEMA
from rocketspark.message.properties.columns import encode_properties_column


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
    flag: int | np.ndarray = 0,
    sys_flag: int = 0,
    reconsume_times: int = 0,
    properties: pa.StringArray | None = None,
) -> pa.RecordBatch:
    """The STORED_SCHEMA batch the broker keeps for a PRODUCER_SCHEMA batch written to one queue.

    `properties` is the batch's :func:`encode_properties_column`, when the caller already built it
    (or, for a standard batch send, the properties strings as sent). `flag` is one for every row or
    each row's (int32).
    """
    require_schema(batch, PRODUCER_SCHEMA, "PRODUCER_SCHEMA")
    n = batch.num_rows
    tags, keys, uniq_key = (batch.column(name) for name in ("tags", "keys", "uniq_key"))
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
            "flag": np.full(n, flag, dtype=np.int32) if isinstance(flag, int) else flag.astype(np.int32),
            "sys_flag": np.full(n, sys_flag, dtype=np.int32),
            "born_timestamp": np.full(n, born_timestamp, dtype=np.int64),
            "born_host": pa.repeat(pa.scalar(born_host, pa.string()), n),
            "store_timestamp": np.full(n, store_timestamp, dtype=np.int64),
            "reconsume_times": np.full(n, reconsume_times, dtype=np.int32),
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
            raise ValueError(f"column {field.name!r} must not be null (row {first_null(array)})")
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=STORED_SCHEMA)
