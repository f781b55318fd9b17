"""RocketMQ's binary message records: their layout, shared by the encoder and the decoder.

A pull response body is a concatenation of these records (reference §4.1), all big-endian::

    TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64 |
    PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST 8 or 20 | STORETIMESTAMP i64 |
    STOREHOST 8 or 20 | RECONSUMETIMES i32 | PREPAREDTRANSACTIONOFFSET i64 |
    BODY i32 length + bytes | TOPIC 1 (V1) or 2 (V2) byte length + UTF-8 | PROPERTIES i16 length + UTF-8

A host is its IP (4 bytes, or 16 when the BORNHOST_V6 / STOREHOST_V6 sys flag bit is set) and an
int32 port. Magic V1 has a one-byte topic length; 5.x writes V2 only for topics over 127 bytes.
Both directions work on whole batches (:mod:`rocketspark.message.records.encoding`,
:mod:`rocketspark.message.records.decoding`), as standard pulls move thousands of messages at a time.
"""

from __future__ import annotations

import functools

import numpy as np

MAGIC_V1 = -626843481  # 0xDAA320A7: one-byte topic length
MAGIC_V2 = -626843477  # 0xDAA320AB: two-byte topic length
MAX_V1_TOPIC_LENGTH = 127
MAX_V2_TOPIC_LENGTH = 0x7FFF
IPV4_HOST = 8  # IP + port
IPV6_HOST = 20

HEAD_FIELDS = [
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
HEAD = np.dtype(HEAD_FIELDS)  # the fields before BORNHOST, 48 bytes
SYS_FLAG_POSITION = 36  # after five ints and two longs
# the fields before the body but the hosts: head, STORETIMESTAMP, RECONSUMETIMES, PREPARED..., body length
PREFIX_WITHOUT_HOSTS = HEAD.itemsize + 8 + 4 + 8 + 4
# the smallest record: IPv4 hosts, V1 magic, empty body, topic and properties
MIN_RECORD = PREFIX_WITHOUT_HOSTS + 2 * IPV4_HOST + 1 + 2
BE_I16 = np.dtype(">i2")
BE_I32 = np.dtype(">i4")


def tail_fields(store_host_length: int) -> list[tuple[str, str] | tuple[str, str, tuple[int]]]:
    """The fields from STORETIMESTAMP to the body length, after BORNHOST."""
    return [
        ("store_timestamp", ">i8"),
        ("store_host", "u1", (store_host_length,)),
        ("reconsume_times", ">i4"),
        ("prepared_transaction_offset", ">i8"),
        ("body_length", ">i4"),
    ]


#: every fixed-width numeric field of a record, decoded to native int64 columns
NUMERIC_NAMES = [name for name, *_ in HEAD_FIELDS + tail_fields(IPV4_HOST) if name != "store_host"]


@functools.cache
def record_prefix(born_host_length: int, store_host_length: int) -> np.dtype:
    """Every field before the body bytes, for one combination of host widths."""
    return np.dtype([*HEAD_FIELDS, ("born_host", "u1", (born_host_length,)), *tail_fields(store_host_length)])
