"""Message records from STORED_SCHEMA batches: the body of a standard pull response (see records.layout).

:func:`encode_records` fills the fixed-width fields of every record with numpy structured
big-endian arrays, and pyarrow's `binary_join_element_wise` kernel concatenates them with the
variable-length parts (one memcpy each). Per-row Python is limited to the body CRC.
"""

from __future__ import annotations

import zlib
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.message import sysflag
from rocketspark.message.batches.arrays import fixed_width, offsets_and_buffer, require_schema
from rocketspark.message.batches.schema import STORED_SCHEMA
from rocketspark.message.properties import codec as props
from rocketspark.message.records.layout import (
    BE_I16,
    HEAD,
    IPV6_HOST,
    tail_fields,
)
from rocketspark.message.records.scalar import SMALL_RECORDS, encode_record, host_bytes, topic_field

_SMALL_COLUMNS = [
    "topic",
    "queue_id",
    "queue_offset",
    "commit_log_offset",
    "body",
    "properties",
    "flag",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "reconsume_times",
]


def _encode_small(batch: pa.RecordBatch, store_host: str) -> bytes:
    """A few records, one at a time (see records.scalar)."""
    columns = [batch.column(name).to_pylist() for name in _SMALL_COLUMNS]
    return b"".join(
        encode_record(
            topic=topic,
            queue_id=queue_id,
            queue_offset=queue_offset,
            commit_log_offset=commit_log_offset,
            body=body,
            properties=properties,
            flag=flag,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            born_host=born_host,
            store_timestamp=store_timestamp,
            store_host=store_host,
            reconsume_times=reconsume_times,
        )
        for (
            topic,
            queue_id,
            queue_offset,
            commit_log_offset,
            body,
            properties,
            flag,
            sys_flag,
            born_timestamp,
            born_host,
            store_timestamp,
            reconsume_times,
        ) in zip(*columns, strict=True)
    )


def encode_records(batch: pa.RecordBatch, store_host: str) -> bytes:
    """The records of a STORED_SCHEMA batch (any slice of one), as a pull response body.

    `store_host` is the broker's "ip:port". The written SYSFLAG carries the BORNHOST_V6 and
    STOREHOST_V6 bits the hosts call for, whatever the stored column says.
    """
    require_schema(batch, STORED_SCHEMA, "STORED_SCHEMA")
    for field, column in zip(STORED_SCHEMA, batch.columns, strict=True):
        if not field.nullable and column.null_count:
            raise ValueError(f"column {field.name!r} of a stored batch holds nulls")
    n = batch.num_rows
    if n == 0:
        return b""
    if n <= SMALL_RECORDS:
        return _encode_small(batch, store_host)
    store = host_bytes(store_host)
    born_codes, born_values = _distinct(batch.column("born_host"))
    born_hosts = [host_bytes(host) for host in born_values]
    topic_codes, topics = _distinct(batch.column("topic"))
    topic_fields, magics = zip(*(topic_field(topic) for topic in topics), strict=True)
    body = batch.column("body")
    properties = batch.column("properties").cast(pa.binary())
    body_offsets, body_buffer = offsets_and_buffer(body)
    body_lengths = np.diff(body_offsets)
    properties_lengths = np.diff(offsets_and_buffer(properties)[0])
    too_long = np.flatnonzero(properties_lengths > props.MAX_PROPERTIES_LENGTH)
    if len(too_long):
        raise ValueError(
            f"the properties of row {too_long[0]} take {properties_lengths[too_long[0]]} bytes; "
            f"a record holds at most {props.MAX_PROPERTIES_LENGTH}"
        )
    born_lengths = np.array([len(host) for host in born_hosts])[born_codes]
    topic_lengths = np.array([len(field) for field in topic_fields])[topic_codes]

    tail = np.empty(n, dtype=np.dtype(tail_fields(len(store))))
    tail["store_timestamp"] = batch.column("store_timestamp").to_numpy()
    tail["store_host"] = np.frombuffer(store, dtype=np.uint8)
    tail["reconsume_times"] = batch.column("reconsume_times").to_numpy()
    tail["prepared_transaction_offset"] = 0
    tail["body_length"] = body_lengths

    head = np.empty(n, dtype=HEAD)
    variable = born_lengths + body_lengths + topic_lengths + 2 + properties_lengths
    head["total_size"] = HEAD.itemsize + tail.itemsize + variable
    head["magic"] = np.array(magics)[topic_codes]
    head["body_crc"] = _body_crcs(body_offsets, body_buffer)
    head["queue_id"] = batch.column("queue_id").to_numpy()
    head["flag"] = batch.column("flag").to_numpy()
    head["queue_offset"] = batch.column("queue_offset").to_numpy()
    head["physical_offset"] = batch.column("commit_log_offset").to_numpy()
    host_bits = np.where(born_lengths == IPV6_HOST, sysflag.BORNHOST_V6, 0)
    if len(store) == IPV6_HOST:
        host_bits |= sysflag.STOREHOST_V6
    head["sys_flag"] = (batch.column("sys_flag").to_numpy() & ~(sysflag.BORNHOST_V6 | sysflag.STOREHOST_V6)) | host_bits
    head["born_timestamp"] = batch.column("born_timestamp").to_numpy()

    parts = [
        fixed_width(head),
        pa.array(born_hosts, pa.large_binary()).take(pa.array(born_codes)),
        fixed_width(tail),
        body.cast(pa.large_binary()),
        pa.array(topic_fields, pa.large_binary()).take(pa.array(topic_codes)),
        fixed_width(properties_lengths.astype(BE_I16)),
        properties.cast(pa.large_binary()),
    ]
    records = pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.large_binary()))
    offsets = np.frombuffer(records.buffers()[1], dtype=np.int64, count=n + 1, offset=records.offset * 8)
    return records.buffers()[2][int(offsets[0]) : int(offsets[-1])].to_pybytes()  # type: ignore[no-any-return]


def _distinct(column: pa.Array) -> tuple[np.ndarray, list[str]]:
    """(the code of each row, the distinct values): so each distinct value is parsed once."""
    encoded = pc.dictionary_encode(column)
    return encoded.indices.to_numpy(), encoded.dictionary.to_pylist()


def _body_crcs(offsets: np.ndarray, buffer: pa.Buffer) -> np.ndarray:
    """`crc32(body) & 0x7FFFFFFF` of every body: the one per-row loop, over views of the buffer."""
    view = memoryview(buffer)
    crc32 = zlib.crc32
    crcs = [crc32(view[start:end]) for start, end in pairwise(offsets.tolist())]
    return np.array(crcs, dtype=np.int64) & 0x7FFFFFFF
