"""RocketMQ's binary message records: what a broker stores and what a standard pull returns.

A pull response body is a concatenation of these records (reference §4.1), all big-endian::

    TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64 |
    PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST 8 or 20 | STORETIMESTAMP i64 |
    STOREHOST 8 or 20 | RECONSUMETIMES i32 | PREPAREDTRANSACTIONOFFSET i64 |
    BODY i32 length + bytes | TOPIC 1 (V1) or 2 (V2) byte length + UTF-8 | PROPERTIES i16 length + UTF-8

A host is its IP (4 bytes, or 16 when the BORNHOST_V6 / STOREHOST_V6 sys flag bit is set) and an
int32 port. Magic V1 has a one-byte topic length; 5.x writes V2 only for topics over 127 bytes.

Both directions work on whole batches, as standard pulls move thousands of messages at a time:

* :func:`encode_records` fills the fixed-width fields of every record with numpy structured
  big-endian arrays, and pyarrow's `binary_join_element_wise` kernel concatenates them with the
  variable-length parts (one memcpy each). Per-row Python is limited to the body CRC.
* decoding walks the record boundaries with a Python loop that reads only TOTALSIZE, then checks
  and reads every other field with numpy gathers at the computed positions, and cuts bodies,
  topics and properties out of the input as Arrow arrays.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from itertools import pairwise
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.message import ids, sysflag
from rocketspark.message import properties as props
from rocketspark.message.convert import (
    binary_from_ranges,
    decompress_bodies,
    message_ids,
    offsets_and_buffer,
    property_values,
    stored_batch,
)
from rocketspark.message.message import MessageExt
from rocketspark.message.schema import STORED_SCHEMA

MAGIC_V1 = -626843481  # 0xDAA320A7: one-byte topic length
MAGIC_V2 = -626843477  # 0xDAA320AB: two-byte topic length
MAX_V1_TOPIC_LENGTH = 127
_MAX_V2_TOPIC_LENGTH = 0x7FFF
_IPV4_HOST = 8  # IP + port
_IPV6_HOST = 20

_HEAD_FIELDS = [
    ("total_size", ">i4"),
    ("magic", ">i4"),
    ("body_crc", ">i4"),
    ("queue_id", ">i4"),
    ("flag", ">i4"),
    ("queue_offset", ">i8"),
    ("physical_offset", ">i8"),
    ("sys_flag", ">i4"),
    ("born_timestamp", ">i8"),
]
_HEAD = np.dtype(_HEAD_FIELDS)  # the fields before BORNHOST, 48 bytes
_SYS_FLAG_POSITION = 36  # after five ints and two longs
# the fields before the body but the hosts: head, STORETIMESTAMP, RECONSUMETIMES, PREPARED..., body length
_PREFIX_WITHOUT_HOSTS = _HEAD.itemsize + 8 + 4 + 8 + 4
# the smallest record: IPv4 hosts, V1 magic, empty body, topic and properties
_MIN_RECORD = _PREFIX_WITHOUT_HOSTS + 2 * _IPV4_HOST + 1 + 2
_TOTAL_SIZE = struct.Struct(">i")
_BE_I16 = np.dtype(">i2")
_BE_I32 = np.dtype(">i4")


def _tail_fields(store_host_length: int) -> list[tuple[str, str] | tuple[str, str, tuple[int]]]:
    """The fields from STORETIMESTAMP to the body length, after BORNHOST."""
    return [
        ("store_timestamp", ">i8"),
        ("store_host", "u1", (store_host_length,)),
        ("reconsume_times", ">i4"),
        ("prepared_transaction_offset", ">i8"),
        ("body_length", ">i4"),
    ]


#: every fixed-width numeric field of a record, decoded to native int64 columns
_NUMERIC_NAMES = [name for name, *_ in _HEAD_FIELDS + _tail_fields(_IPV4_HOST) if name != "store_host"]
_NUMERIC = np.dtype([(name, np.int64) for name in _NUMERIC_NAMES])


@functools.cache
def _prefix(born_host_length: int, store_host_length: int) -> np.dtype:
    """Every field before the body bytes, for one combination of host widths."""
    return np.dtype([*_HEAD_FIELDS, ("born_host", "u1", (born_host_length,)), *_tail_fields(store_host_length)])


class RecordDecodeError(ValueError):
    """The bytes are not a well-formed concatenation of message records."""


# ---------------------------------------------------------------------------------------------
# encoding


def encode_records(batch: pa.RecordBatch, store_host: str) -> bytes:
    """The records of a STORED_SCHEMA batch (any slice of one), as a pull response body.

    `store_host` is the broker's "ip:port". The written SYSFLAG carries the BORNHOST_V6 and
    STOREHOST_V6 bits the hosts call for, whatever the stored column says.
    """
    if not batch.schema.equals(STORED_SCHEMA):
        raise ValueError(f"expected a batch with STORED_SCHEMA, got:\n{batch.schema}")
    for field, column in zip(STORED_SCHEMA, batch.columns, strict=True):
        if not field.nullable and column.null_count:
            raise ValueError(f"column {field.name!r} of a stored batch holds nulls")
    n = batch.num_rows
    if n == 0:
        return b""
    store = _host_bytes(store_host)
    born_codes, born_values = _distinct(batch.column("born_host"))
    born_hosts = [_host_bytes(host) for host in born_values]
    topic_codes, topics = _distinct(batch.column("topic"))
    topic_fields, magics = zip(*(_topic_field(topic) for topic in topics), strict=True)
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

    tail = np.empty(n, dtype=np.dtype(_tail_fields(len(store))))
    tail["store_timestamp"] = batch.column("store_timestamp").to_numpy()
    tail["store_host"] = np.frombuffer(store, dtype=np.uint8)
    tail["reconsume_times"] = batch.column("reconsume_times").to_numpy()
    tail["prepared_transaction_offset"] = 0
    tail["body_length"] = body_lengths

    head = np.empty(n, dtype=_HEAD)
    variable = born_lengths + body_lengths + topic_lengths + 2 + properties_lengths
    head["total_size"] = _HEAD.itemsize + tail.itemsize + variable
    head["magic"] = np.array(magics)[topic_codes]
    head["body_crc"] = _body_crcs(body_offsets, body_buffer)
    head["queue_id"] = batch.column("queue_id").to_numpy()
    head["flag"] = batch.column("flag").to_numpy()
    head["queue_offset"] = batch.column("queue_offset").to_numpy()
    head["physical_offset"] = batch.column("commit_log_offset").to_numpy()
    host_bits = np.where(born_lengths == _IPV6_HOST, sysflag.BORNHOST_V6, 0)
    if len(store) == _IPV6_HOST:
        host_bits |= sysflag.STOREHOST_V6
    head["sys_flag"] = (batch.column("sys_flag").to_numpy() & ~(sysflag.BORNHOST_V6 | sysflag.STOREHOST_V6)) | host_bits
    head["born_timestamp"] = batch.column("born_timestamp").to_numpy()

    parts = [
        _fixed_width(head),
        pa.array(born_hosts, pa.large_binary()).take(pa.array(born_codes)),
        _fixed_width(tail),
        body.cast(pa.large_binary()),
        pa.array(topic_fields, pa.large_binary()).take(pa.array(topic_codes)),
        _fixed_width(properties_lengths.astype(_BE_I16)),
        properties.cast(pa.large_binary()),
    ]
    records = pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.large_binary()))
    offsets = np.frombuffer(records.buffers()[1], dtype=np.int64, count=n + 1, offset=records.offset * 8)
    return records.buffers()[2][int(offsets[0]) : int(offsets[-1])].to_pybytes()  # type: ignore[no-any-return]


def _host_bytes(address: str) -> bytes:
    """An "ip:port" as a record holds it: IP (4 or 16 bytes) and int32 port."""
    try:
        return ids.socket_address_bytes(address)
    except (ValueError, struct.error):
        raise ValueError(f"{address!r} is not an ip:port address") from None


def _topic_field(topic: str) -> tuple[bytes, int]:
    """(the TOPIC field, the magic code it calls for): V1 up to 127 bytes, else V2."""
    encoded = topic.encode()
    if len(encoded) <= MAX_V1_TOPIC_LENGTH:
        return bytes([len(encoded)]) + encoded, MAGIC_V1
    if len(encoded) <= _MAX_V2_TOPIC_LENGTH:
        return struct.pack(">h", len(encoded)) + encoded, MAGIC_V2
    raise ValueError(f"topic of {len(encoded)} bytes is too long for a record")


def _distinct(column: pa.Array) -> tuple[np.ndarray, list[str]]:
    """(the code of each row, the distinct values): so each distinct value is parsed once."""
    encoded = pc.dictionary_encode(column)
    return encoded.indices.to_numpy(), encoded.dictionary.to_pylist()


def _fixed_width(values: np.ndarray) -> pa.Array:
    """Each element's raw bytes as one value of a large_binary array."""
    width = values.dtype.itemsize
    offsets = np.arange(0, (len(values) + 1) * width, width, dtype=np.int64)
    return pa.Array.from_buffers(pa.large_binary(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(values)])


def _body_crcs(offsets: np.ndarray, buffer: pa.Buffer) -> np.ndarray:
    """`crc32(body) & 0x7FFFFFFF` of every body: the one per-row loop, over views of the buffer."""
    view = memoryview(buffer)
    crc32 = zlib.crc32
    crcs = [crc32(view[start:end]) for start, end in pairwise(offsets.tolist())]
    return np.array(crcs, dtype=np.int64) & 0x7FFFFFFF


# ---------------------------------------------------------------------------------------------
# decoding


class _Hosts(NamedTuple):
    """A host column as the code of each row into the distinct "ip:port" strings."""

    codes: np.ndarray
    strings: list[str]

    def column(self) -> pa.Array:
        return pa.array(self.strings, pa.string()).take(pa.array(self.codes))


class _Records(NamedTuple):
    """The decoded fields of every record, as columns."""

    head: np.ndarray  # the fixed-width numeric fields (_NUMERIC dtype)
    sys_flag: np.ndarray
    born: _Hosts
    store: _Hosts
    body: pa.Array
    topic: pa.Array
    properties: pa.Array

    def offset_msg_ids(self, rows: np.ndarray) -> pa.Array:
        """The offset msgId of the records at `rows`, computed per distinct store host."""
        offsets = self.head["physical_offset"][rows]
        codes, hosts = self.store[0][rows], self.store[1]
        if len(hosts) == 1:
            return ids.offset_msg_ids(hosts[0], offsets)
        order = np.argsort(codes, kind="stable")
        groups = [ids.offset_msg_ids(host, offsets[order[codes[order] == code]]) for code, host in enumerate(hosts)]
        return pa.chunked_array(groups, pa.string()).combine_chunks().take(pa.array(np.argsort(order)))


def _fail(message: str, bad: np.ndarray, starts: np.ndarray) -> None:
    """Raise for the first record flagged in `bad`, if any."""
    rows = np.flatnonzero(bad)
    if len(rows):
        row = int(rows[0])
        raise RecordDecodeError(f"record {row} at byte {int(starts[row])}: {message}")


def _read(data: np.ndarray, positions: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The big-endian value of `dtype` at each byte position, as int64."""
    raw = data[positions[:, None] + np.arange(dtype.itemsize)]
    return raw.view(dtype)[:, 0].astype(np.int64)


def _record_starts(data: bytes | memoryview) -> np.ndarray:
    """Where each record starts: the only Python loop, which follows the TOTALSIZE fields."""
    size = len(data)
    starts: list[int] = []
    append = starts.append
    unpack = _TOTAL_SIZE.unpack_from
    position = 0
    try:
        while position < size:
            (total,) = unpack(data, position)
            if total < _MIN_RECORD:
                raise RecordDecodeError(f"record {len(starts)} at byte {position}: TOTALSIZE {total} is too small")
            append(position)
            position += total
    except struct.error:
        raise RecordDecodeError(f"truncated: {size - position} bytes at byte {position} cannot hold a record") from None
    if position > size:
        last = starts[-1]
        raise RecordDecodeError(
            f"truncated: record {len(starts) - 1} at byte {last} has TOTALSIZE {position - last} "
            f"but only {size - last} bytes remain"
        )
    return np.array(starts, dtype=np.int64)


def _host_strings(raw: np.ndarray) -> _Hosts:
    """The hosts of rows of raw host bytes of one width, each distinct one formatted once."""
    rows, width = raw.shape
    fixed = pa.Array.from_buffers(pa.binary(width), rows, [None, pa.py_buffer(np.ascontiguousarray(raw))])
    encoded = pc.dictionary_encode(fixed)
    return _Hosts(encoded.indices.to_numpy(), [_format_host(host) for host in encoded.dictionary.to_pylist()])


def _format_host(raw: bytes) -> str:
    ip = ipaddress.ip_address(raw[:-4])
    port = int.from_bytes(raw[-4:], "big", signed=True)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


class _Layout(NamedTuple):
    """Where the parts of each record are: absolute byte positions and lengths, one per record."""

    starts: np.ndarray
    sys_flag: np.ndarray
    born_width: np.ndarray
    store_width: np.ndarray
    body_at: np.ndarray
    body_length: np.ndarray
    topic_at: np.ndarray
    topic_length: np.ndarray
    properties_at: np.ndarray
    properties_length: np.ndarray


def _locate(raw: np.ndarray, starts: np.ndarray) -> _Layout:
    """Check that each record's length fields add up to its TOTALSIZE and locate its parts.

    Each field is read only once the checks before it prove it lies inside its record.
    """
    totals = _read(raw, starts, _BE_I32)
    magic = _read(raw, starts + 4, _BE_I32)
    _fail("unknown MAGICCODE", (magic != MAGIC_V1) & (magic != MAGIC_V2), starts)
    sys_flag = _read(raw, starts + _SYS_FLAG_POSITION, _BE_I32)
    born_width = np.where(sys_flag & sysflag.BORNHOST_V6, _IPV6_HOST, _IPV4_HOST)
    store_width = np.where(sys_flag & sysflag.STOREHOST_V6, _IPV6_HOST, _IPV4_HOST)
    body_at = _PREFIX_WITHOUT_HOSTS + born_width + store_width  # positions are relative to the record start here
    topic_length_size = np.where(magic == MAGIC_V1, 1, 2)
    _fail("TOTALSIZE is too small for its hosts", body_at + topic_length_size + 2 > totals, starts)
    body_length = _read(raw, starts + body_at - 4, _BE_I32)
    topic_at = body_at + body_length
    _fail("body length overruns the record", (body_length < 0) | (topic_at + topic_length_size + 2 > totals), starts)
    topic_length = np.where(
        magic == MAGIC_V1, raw[starts + topic_at].astype(np.int64), _read(raw, starts + topic_at, _BE_I16)
    )
    properties_at = topic_at + topic_length_size + topic_length
    _fail("topic length overruns the record", (topic_length < 0) | (properties_at + 2 > totals), starts)
    properties_length = _read(raw, starts + properties_at, _BE_I16)
    _fail("properties length overruns the record", properties_length < 0, starts)
    _fail("TOTALSIZE disagrees with the lengths of its fields", properties_at + 2 + properties_length != totals, starts)
    return _Layout(
        starts,
        sys_flag.astype(np.int32),
        born_width,
        store_width,
        starts + body_at,
        body_length,
        starts + topic_at + topic_length_size,
        topic_length,
        starts + properties_at + 2,
        properties_length,
    )


def _fixed_fields(buffer: pa.Buffer, layout: _Layout) -> tuple[np.ndarray, _Hosts, _Hosts]:
    """(numeric fields, born hosts, store hosts), gathered per combination of host widths."""
    n = len(layout.starts)
    head = np.empty(n, dtype=_NUMERIC)
    born = _Hosts(np.empty(n, dtype=np.int64), [])
    store = _Hosts(np.empty(n, dtype=np.int64), [])
    host_bits = layout.sys_flag & (sysflag.BORNHOST_V6 | sysflag.STOREHOST_V6)
    for bits in np.unique(host_bits):
        rows = np.flatnonzero(host_bits == bits)
        prefix = _prefix(int(layout.born_width[rows[0]]), int(layout.store_width[rows[0]]))
        starts = layout.starts[rows]
        gathered = binary_from_ranges(buffer, starts, starts + prefix.itemsize, pa.binary())
        fields = np.frombuffer(gathered.buffers()[2], dtype=prefix, count=len(rows))
        for name in _NUMERIC_NAMES:
            head[name][rows] = fields[name]
        for hosts, name in ((born, "born_host"), (store, "store_host")):
            found = _host_strings(fields[name])
            hosts.codes[rows] = found.codes + len(hosts.strings)
            hosts.strings.extend(found.strings)
    return head, born, store


def _decode(data: bytes | memoryview, decompress: bool) -> _Records:
    view = memoryview(data).cast("B") if isinstance(data, memoryview) else data
    buffer = pa.py_buffer(view)
    raw = np.frombuffer(buffer, dtype=np.uint8)
    layout = _locate(raw, _record_starts(view))
    head, born, store = _fixed_fields(buffer, layout)
    body = binary_from_ranges(buffer, layout.body_at, layout.body_at + layout.body_length, pa.binary())
    topic = binary_from_ranges(buffer, layout.topic_at, layout.topic_at + layout.topic_length, pa.string())
    properties = binary_from_ranges(
        buffer, layout.properties_at, layout.properties_at + layout.properties_length, pa.string()
    )
    for name, column in (("topic", topic), ("properties", properties)):
        try:
            column.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise RecordDecodeError(f"a {name} is not valid UTF-8: {exc}") from None
    sys_flag = layout.sys_flag
    if decompress:
        try:
            body, sys_flag = decompress_bodies(body, sys_flag)
        except ValueError as exc:
            raise RecordDecodeError(str(exc)) from None
    return _Records(head, sys_flag, born, store, body, topic, properties)


def decode_records(data: bytes | memoryview, *, broker_name: str = "", decompress: bool = True) -> list[MessageExt]:
    """The messages of a concatenation of records, as Java's `MessageDecoder.decodesBatch` on a client.

    Compressed bodies are inflated (and the COMPRESSED bit cleared) unless `decompress` is false.
    `msg_id` is the producer's UNIQ_KEY when set, else the offset msgId, as Java's `getMsgId`.
    Raises RecordDecodeError for truncated or corrupt input.
    """
    records = _decode(data, decompress)
    offset_ids = records.offset_msg_ids(np.arange(len(records.head)))
    (uniq_key,) = property_values(records.properties, props.UNIQ_KEY)
    head = records.head
    columns = zip(
        records.topic.to_pylist(),
        records.body.to_pylist(),
        head["queue_id"].tolist(),
        head["queue_offset"].tolist(),
        head["physical_offset"].tolist(),
        message_ids(uniq_key, lambda rows: offset_ids.take(pa.array(rows))).to_pylist(),
        offset_ids.to_pylist(),
        head["born_timestamp"].tolist(),
        records.born.codes.tolist(),
        head["store_timestamp"].tolist(),
        records.store.codes.tolist(),
        head["flag"].tolist(),
        records.sys_flag.tolist(),
        head["body_crc"].tolist(),
        head["reconsume_times"].tolist(),
        head["prepared_transaction_offset"].tolist(),
        records.properties.to_pylist(),
        strict=True,
    )
    return [
        MessageExt(
            topic=topic,
            body=body,
            queue_id=queue_id,
            queue_offset=queue_offset,
            commit_log_offset=commit_log_offset,
            msg_id=msg_id,
            offset_msg_id=offset_msg_id,
            born_timestamp=born_timestamp,
            born_host=records.born.strings[born_code],
            store_timestamp=store_timestamp,
            store_host=records.store.strings[store_code],
            flag=flag,
            sys_flag=sys_flag,
            body_crc=body_crc,
            reconsume_times=reconsume_times,
            prepared_transaction_offset=prepared_transaction_offset,
            broker_name=broker_name,
            properties=props.decode_properties(properties),
        )
        for (
            topic,
            body,
            queue_id,
            queue_offset,
            commit_log_offset,
            msg_id,
            offset_msg_id,
            born_timestamp,
            born_code,
            store_timestamp,
            store_code,
            flag,
            sys_flag,
            body_crc,
            reconsume_times,
            prepared_transaction_offset,
            properties,
        ) in columns
    ]


def decode_records_to_batch(data: bytes | memoryview, *, decompress: bool = True) -> pa.RecordBatch:
    """The records as a STORED_SCHEMA batch: what :func:`decode_records` reads, straight into Arrow.

    tags and keys come from the TAGS and KEYS properties (null when absent).
    """
    records = _decode(data, decompress)
    tags, keys, uniq_key = property_values(records.properties, props.TAGS, props.KEYS, props.UNIQ_KEY)
    head = records.head
    return stored_batch(
        {
            "topic": records.topic,
            "queue_id": head["queue_id"].astype(np.int32),
            "queue_offset": head["queue_offset"],
            "commit_log_offset": head["physical_offset"],
            "msg_id": message_ids(uniq_key, records.offset_msg_ids),
            "tags": tags,
            "keys": keys,
            "body": records.body,
            "flag": head["flag"].astype(np.int32),
            "sys_flag": records.sys_flag,
            "born_timestamp": head["born_timestamp"],
            "born_host": records.born.column(),
            "store_timestamp": head["store_timestamp"],
            "reconsume_times": head["reconsume_times"].astype(np.int32),
            "properties": records.properties,
        }
    )
