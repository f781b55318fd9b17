"""Message records one at a time, with `struct`: for single sends, small pulls and the broker's
lookups of one message (by offset, id or key; the ends of transactions; sends back).

The whole-batch codecs (:mod:`rocketspark.message.records.encoding`,
:mod:`rocketspark.message.records.decoding`) make a few dozen numpy and Arrow calls per batch,
each of which costs tens of microseconds whatever the batch's size. Below `SMALL_RECORDS` records
a per-record Python loop is cheaper (about 5 µs a record either way here), so both codecs hand
small inputs to this module. The layout is the one of :mod:`rocketspark.message.records.layout`;
the tests check that both paths give the same bytes and the same messages.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from rocketspark.errors import DecodeError
from rocketspark.message import ids, sysflag
from rocketspark.message.message import MessageExt
from rocketspark.message.properties import codec as props
from rocketspark.message.records.layout import (
    IPV4_HOST,
    IPV6_HOST,
    MAGIC_V1,
    MAGIC_V2,
    MAX_V1_TOPIC_LENGTH,
    MAX_V2_TOPIC_LENGTH,
    MIN_RECORD,
)

#: at most this many records go through the per-record path
SMALL_RECORDS = 64

_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP (layout.HEAD_FIELDS)
_STORE_TIME = struct.Struct(">q")
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, body length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HOST_BITS = sysflag.BORNHOST_V6 | sysflag.STOREHOST_V6


class RecordDecodeError(DecodeError):
    """The bytes are not a well-formed concatenation of message records."""


@functools.lru_cache(maxsize=1024)
def host_bytes(address: str) -> bytes:
    """An "ip:port" as a record holds it: IP (4 or 16 bytes) and int32 port."""
    try:
        return ids.socket_address_bytes(address)
    except (ValueError, struct.error):
        raise ValueError(f"{address!r} is not an ip:port address") from None


@functools.lru_cache(maxsize=1024)
def topic_field(topic: str) -> tuple[bytes, int]:
    """(the TOPIC field, the magic code it calls for): V1 up to 127 bytes, else V2."""
    encoded = topic.encode()
    if len(encoded) <= MAX_V1_TOPIC_LENGTH:
        return bytes([len(encoded)]) + encoded, MAGIC_V1
    if len(encoded) <= MAX_V2_TOPIC_LENGTH:
        return _I16.pack(len(encoded)) + encoded, MAGIC_V2
    raise ValueError(f"topic of {len(encoded)} bytes is too long for a record")


def encode_record(
    *,
    topic: str,
    queue_id: int,
    queue_offset: int,
    commit_log_offset: int,
    body: bytes,
    properties: str,
    flag: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: str,
    store_timestamp: int,
    store_host: str,
    reconsume_times: int,
) -> bytes:
    """One record, as `encode_records` writes the same message (host bits set from the hosts)."""
    encoded = properties.encode()
    if len(encoded) > props.MAX_PROPERTIES_LENGTH:
        raise ValueError(
            f"the properties take {len(encoded)} bytes; a record holds at most {props.MAX_PROPERTIES_LENGTH}"
        )
    born, store = host_bytes(born_host), host_bytes(store_host)
    topic_bytes, magic = topic_field(topic)
    host_bits = (sysflag.BORNHOST_V6 if len(born) == IPV6_HOST else 0) | (
        sysflag.STOREHOST_V6 if len(store) == IPV6_HOST else 0
    )
    total = _HEAD.size + len(born) + 8 + len(store) + _TAIL.size + len(body) + len(topic_bytes) + 2 + len(encoded)
    return b"".join(
        (
            _HEAD.pack(
                total,
                magic,
                zlib.crc32(body) & 0x7FFFFFFF,
                queue_id,
                flag,
                queue_offset,
                commit_log_offset,
                (sys_flag & ~_HOST_BITS) | host_bits,
                born_timestamp,
            ),
            born,
            _STORE_TIME.pack(store_timestamp),
            store,
            _TAIL.pack(reconsume_times, 0, len(body)),
            body,
            topic_bytes,
            _I16.pack(len(encoded)),
            encoded,
        )
    )


def record_bounds(data: bytes | memoryview, limit: int | None = None) -> list[int]:
    """Where each record starts, and the end of the last: follows the TOTALSIZE fields (of the
    first `limit` records only, when given)."""
    size = len(data)
    bounds = [0]
    position = 0
    unpack = _I32.unpack_from
    try:
        while position < size and (limit is None or len(bounds) <= limit):
            (total,) = unpack(data, position)
            if total < MIN_RECORD:
                raise RecordDecodeError(f"record {len(bounds) - 1} at byte {position}: TOTALSIZE {total} is too small")
            position += total
            bounds.append(position)
    except struct.error:
        raise RecordDecodeError(f"truncated: {size - position} bytes at byte {position} cannot hold a record") from None
    if position > size:
        last = bounds[-2]
        raise RecordDecodeError(
            f"truncated: record {len(bounds) - 2} at byte {last} has TOTALSIZE {position - last} "
            f"but only {size - last} bytes remain"
        )
    return bounds


@functools.lru_cache(maxsize=1024)
def format_host(raw: bytes) -> str:
    """A record's host field (IP and int32 port) as "ip:port", "[ip]:port" for IPv6."""
    ip = ipaddress.ip_address(raw[:-4])
    port = int.from_bytes(raw[-4:], "big", signed=True)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def decode_small(
    data: bytes | memoryview, bounds: list[int], *, broker_name: str = "", decompress: bool = True
) -> list[MessageExt]:
    """The messages of a few records (`bounds`: their :func:`record_bounds`): what `decode_records`
    returns, one record at a time."""
    view = bytes(data)
    return [_parse(view, index, start, decompress).message(broker_name) for index, start in enumerate(bounds[:-1])]


def stored_rows(data: bytes | memoryview, starts: Sequence[int], *, decompress: bool) -> list[dict[str, Any]]:
    """The records starting at `starts` as STORED_SCHEMA rows, one record at a time: what
    `decode_records_to_batch` makes of them (tags and keys from their properties, None when absent)."""
    view = bytes(data)
    rows = []
    for index, start in enumerate(starts):
        record = _parse(view, index, start, decompress)
        if index + 1 < len(starts) and start + record.total_size > starts[index + 1]:
            raise RecordDecodeError(f"record {index} at byte {start}: TOTALSIZE overruns the next record")
        rows.append(record.stored_row())
    return rows


class _Record(NamedTuple):
    """The fields of one record, as parsed; hosts still in their record form."""

    total_size: int
    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    physical_offset: int
    born_timestamp: int
    born: bytes
    store_timestamp: int
    store: bytes
    flag: int
    sys_flag: int
    body_crc: int
    reconsume_times: int
    prepared_transaction_offset: int
    properties: str

    def message(self, broker_name: str) -> MessageExt:
        store_host = format_host(self.store)
        properties = props.decode_properties(self.properties)
        offset_msg_id = ids.offset_msg_id(store_host, self.physical_offset)
        return MessageExt(
            topic=self.topic,
            body=self.body,
            queue_id=self.queue_id,
            queue_offset=self.queue_offset,
            commit_log_offset=self.physical_offset,
            msg_id=properties.get(props.UNIQ_KEY, offset_msg_id),
            offset_msg_id=offset_msg_id,
            born_timestamp=self.born_timestamp,
            born_host=format_host(self.born),
            store_timestamp=self.store_timestamp,
            store_host=store_host,
            flag=self.flag,
            sys_flag=self.sys_flag,
            body_crc=self.body_crc,
            reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
            broker_name=broker_name,
            properties=properties,
        )

    def stored_row(self) -> dict[str, Any]:
        properties = props.decode_properties(self.properties)
        uniq_key = properties.get(props.UNIQ_KEY)
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "commit_log_offset": self.physical_offset,
            "msg_id": uniq_key
            if uniq_key is not None
            else ids.offset_msg_id(format_host(self.store), self.physical_offset),
            "tags": properties.get(props.TAGS),
            "keys": properties.get(props.KEYS),
            "body": self.body,
            "flag": self.flag,
            "sys_flag": self.sys_flag,
            "born_timestamp": self.born_timestamp,
            "born_host": format_host(self.born),
            "store_timestamp": self.store_timestamp,
            "reconsume_times": self.reconsume_times,
            "properties": self.properties,
        }


def _parse(data: bytes, index: int, start: int, decompress: bool) -> _Record:
    def fail(reason: str) -> RecordDecodeError:
        return RecordDecodeError(f"record {index} at byte {start}: {reason}")

    try:
        (total, magic, body_crc, queue_id, flag, queue_offset, physical, sys_flag, born_ts) = _HEAD.unpack_from(
            data, start
        )
    except struct.error:
        raise fail("starts too close to the end of the input to hold a record") from None
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise fail("unknown MAGICCODE")
    if total < MIN_RECORD or start + total > len(data):
        raise fail(f"TOTALSIZE {total} does not fit the {len(data) - start} bytes from there")
    end = start + total
    born_width = IPV6_HOST if sys_flag & sysflag.BORNHOST_V6 else IPV4_HOST
    store_width = IPV6_HOST if sys_flag & sysflag.STOREHOST_V6 else IPV4_HOST
    body_at = _HEAD.size + born_width + 8 + store_width + _TAIL.size
    topic_size = 1 if magic == MAGIC_V1 else 2
    if body_at + topic_size + 2 > total:
        raise fail("TOTALSIZE is too small for its hosts")
    at = start + _HEAD.size
    born = data[at : at + born_width]
    at += born_width
    (store_ts,) = _STORE_TIME.unpack_from(data, at)
    at += 8
    store = data[at : at + store_width]
    reconsume_times, prepared, body_length = _TAIL.unpack_from(data, at + store_width)
    topic_at = body_at + body_length
    if body_length < 0 or topic_at + topic_size + 2 > total:
        raise fail("body length overruns the record")
    body = data[start + body_at : start + topic_at]
    topic_length = data[start + topic_at] if magic == MAGIC_V1 else _I16.unpack_from(data, start + topic_at)[0]
    properties_at = topic_at + topic_size + topic_length
    if topic_length < 0 or properties_at + 2 > total:
        raise fail("topic length overruns the record")
    (properties_length,) = _I16.unpack_from(data, start + properties_at)
    if properties_length < 0:
        raise fail("properties length overruns the record")
    if properties_at + 2 + properties_length != total:
        raise fail("TOTALSIZE disagrees with the lengths of its fields")
    try:
        topic = data[start + topic_at + topic_size : start + properties_at].decode()
        text = data[start + properties_at + 2 : end].decode()
    except UnicodeDecodeError as exc:
        raise fail(f"a topic or the properties are not valid UTF-8: {exc}") from None
    if decompress and sys_flag & sysflag.COMPRESSED:
        body, sys_flag = _inflate(body, sys_flag, fail)
    return _Record(
        total,
        topic,
        body,
        queue_id,
        queue_offset,
        physical,
        born_ts,
        born,
        store_ts,
        store,
        flag,
        sys_flag,
        body_crc,
        reconsume_times,
        prepared,
        text,
    )


def _inflate(body: bytes, sys_flag: int, fail: Callable[[str], RecordDecodeError]) -> tuple[bytes, int]:
    """A compressed body inflated, and the sys flag without its COMPRESSED bit."""
    kind = sys_flag & sysflag.COMPRESSION_TYPE_MASK
    if kind not in (0, sysflag.COMPRESSION_ZLIB):
        name = sysflag.COMPRESSION_NAMES.get(kind, f"unknown type 0x{kind:x}")
        raise fail(f"compressed with {name}; only zlib bodies can be decompressed")
    try:
        return zlib.decompress(body), sys_flag & ~sysflag.COMPRESSED
    except zlib.error as exc:
        raise fail(f"a zlib-compressed body does not decompress: {exc}") from None
