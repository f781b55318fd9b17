"""Message records (§4.1) and batch bodies (§4.5): golden bytes, round trips, corrupt input."""

from __future__ import annotations

import ipaddress
import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketspark.message import ids, sysflag
from rocketspark.message.batches.schema import STORED_SCHEMA
from rocketspark.message.batches.stored import stored_batch_from_rows
from rocketspark.message.properties import codec as props
from rocketspark.message.records.batch_body import BatchColumns, BatchDecodeError, decode_batch_body, encode_batch_body
from rocketspark.message.records.decoding import (
    RecordDecodeError,
    decode_records,
    decode_records_to_batch,
    record_bounds_array,
)
from rocketspark.message.records.encoding import encode_records
from rocketspark.message.records.layout import MAGIC_V1, MAGIC_V2
from rocketspark.message.records.scalar import SMALL_RECORDS
from rocketspark.protocol.codec import FrameDecoder
from rocketspark.protocol.codes import LanguageCode, RequestCode

GOLDEN_BATCH = Path(__file__).parents[1] / "fixtures" / "real_client" / "send_batch_message.bin"
STORE_HOST = "10.0.0.2:10911"


def stored(
    bodies: list[bytes],
    properties: list[str] | None = None,
    *,
    topic: str = "TopicTest",
    born_hosts: list[str] | None = None,
    sys_flags: list[int] | None = None,
    store_host: str = STORE_HOST,
) -> pa.RecordBatch:
    n = len(bodies)
    properties = properties if properties is not None else [""] * n
    parsed = [props.decode_properties(text) for text in properties]
    return stored_batch_from_rows(
        topics=[topic] * n,
        queue_ids=[3] * n,
        queue_offsets=range(42, 42 + n),
        first_commit_log_offset=1000,
        store_timestamp=1_700_000_000_123,
        store_host=store_host,
        bodies=bodies,
        properties=properties,
        tags=[p.get(props.TAGS) for p in parsed],
        keys=[p.get(props.KEYS) for p in parsed],
        uniq_keys=[p.get(props.UNIQ_KEY) for p in parsed],
        flags=[7 + i for i in range(n)],
        sys_flags=sys_flags if sys_flags is not None else [0] * n,
        born_timestamps=[1_700_000_000_000 + i for i in range(n)],
        born_hosts=born_hosts if born_hosts is not None else ["10.0.0.1:5555"] * n,
        reconsume_times=[i % 3 for i in range(n)],
    )


def golden_record(body: bytes, properties: str, *, sys_flag: int = 0) -> bytes:
    """One record of the batch `stored([body], [properties])`, written field by field from §4.1."""
    topic = b"TopicTest"
    encoded = properties.encode()
    rest = (
        struct.pack(">iiiqqiq", zlib.crc32(body) & 0x7FFFFFFF, 3, 7, 42, 1000, sys_flag, 1_700_000_000_000)
        + bytes([10, 0, 0, 1])
        + struct.pack(">i", 5555)
        + struct.pack(">q", 1_700_000_000_123)
        + bytes([10, 0, 0, 2])
        + struct.pack(">i", 10911)
        + struct.pack(">iq", 0, 0)  # reconsume times, prepared transaction offset
        + struct.pack(">i", len(body))
        + body
        + bytes([len(topic)])
        + topic
        + struct.pack(">h", len(encoded))
        + encoded
    )
    return struct.pack(">iI", 8 + len(rest), 0xDAA320A7) + rest


# ---------------------------------------------------------------------------------------------
# encode_records / decode_records


def test_encodes_one_record_exactly_as_the_reference_lays_it_out() -> None:
    properties = "TAGS\x01TagA\x02UNIQ_KEY\x010A000001000000000000000000000001\x02"
    record = golden_record(b"hello", properties)
    assert len(record) == 84 + 4 + 5 + 1 + 9 + 2 + len(properties)
    assert encode_records(stored([b"hello"], [properties]), STORE_HOST) == record


def test_decodes_a_hand_built_record() -> None:
    properties = "TAGS\x01TagA\x02KEYS\x01k1 k2\x02color\x01red\x02"
    (message,) = decode_records(golden_record(b"hello", properties), broker_name="broker-a")
    assert message.topic == "TopicTest"
    assert message.body == b"hello"
    assert (message.queue_id, message.queue_offset, message.commit_log_offset) == (3, 42, 1000)
    assert (message.flag, message.sys_flag, message.reconsume_times) == (7, 0, 0)
    assert message.born_timestamp == 1_700_000_000_000
    assert message.store_timestamp == 1_700_000_000_123
    assert message.born_host == "10.0.0.1:5555"
    assert message.store_host == STORE_HOST
    assert message.body_crc == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert message.broker_name == "broker-a"
    assert message.tags == "TagA" and message.keys == "k1 k2"
    assert message.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "color": "red"}
    # no UNIQ_KEY: both ids are the offset msgId of (store host, commit log offset)
    assert message.msg_id == message.offset_msg_id == ids.offset_msg_id(STORE_HOST, 1000)


def test_round_trip_of_a_batch() -> None:
    bodies = [bytes([i]) * (i * 37 % 300) for i in range(50)]
    properties = [
        props.encode_properties(
            {props.TAGS: f"Tag{i % 4}", props.KEYS: f"key-{i}", "n": str(i)}
            | ({props.UNIQ_KEY: f"{i:032X}"} if i % 2 else {})
        )
        for i in range(50)
    ]
    batch = stored(bodies, properties)
    data = encode_records(batch, STORE_HOST)
    assert decode_records_to_batch(data).equals(batch)
    messages = decode_records(data)
    assert [m.body for m in messages] == bodies
    assert [m.msg_id for m in messages] == batch.column("msg_id").to_pylist()
    assert [m.offset_msg_id for m in messages] == [ids.offset_msg_id(STORE_HOST, 1000 + i) for i in range(50)]
    assert [m.msg_id for m in messages][:2] == [ids.offset_msg_id(STORE_HOST, 1000), f"{1:032X}"]
    assert [m.tags for m in messages] == batch.column("tags").to_pylist()
    assert [m.queue_offset for m in messages] == list(range(42, 92))
    assert [m.properties for m in messages] == [props.decode_properties(p) for p in properties]


def test_a_slice_encodes_as_its_part_of_the_whole() -> None:
    batch = stored([b"a" * i for i in range(10)])
    whole = encode_records(batch, STORE_HOST)
    sizes = [struct.unpack_from(">i", whole, 0)[0]]
    for _ in range(9):
        sizes.append(struct.unpack_from(">i", whole, sum(sizes))[0])
    start = sum(sizes[:3])
    assert encode_records(batch.slice(3, 4), STORE_HOST) == whole[start : start + sum(sizes[3:7])]


def test_empty() -> None:
    assert encode_records(stored([]), STORE_HOST) == b""
    assert decode_records(b"") == []
    empty = decode_records_to_batch(b"")
    assert empty.num_rows == 0 and empty.schema.equals(STORED_SCHEMA)


def test_ipv6_hosts_set_their_sys_flag_bits_and_widths() -> None:
    batch = stored([b"x", b"y", b"z"], born_hosts=["[::1]:5555", "10.0.0.1:5555", "[2001:db8::7]:1"])
    data = encode_records(batch, "[fe80::1]:10911")
    first_sys_flag = struct.unpack_from(">i", data, 36)[0]
    assert first_sys_flag & (sysflag.BORNHOST_V6 | sysflag.STOREHOST_V6) == sysflag.BORNHOST_V6 | sysflag.STOREHOST_V6
    # IPv6 hosts take 20 bytes each, IPv4 ones 8: records 1 and 2 differ by 12 bytes
    first = struct.unpack_from(">i", data, 0)[0]
    second = struct.unpack_from(">i", data, first)[0]
    assert first - second == 12
    assert data[48:64] == bytes(15) + b"\x01"
    messages = decode_records(data)
    assert [m.born_host for m in messages] == ["[::1]:5555", "10.0.0.1:5555", "[2001:db8::7]:1"]
    assert {m.store_host for m in messages} == {"[fe80::1]:10911"}
    assert [m.sys_flag for m in messages] == [0x30, 0x20, 0x30]
    assert messages[0].offset_msg_id == ids.offset_msg_id("[fe80::1]:10911", 1000)
    assert len(messages[0].offset_msg_id) == 56
    decoded = decode_records_to_batch(data)
    assert decoded.column("born_host").equals(batch.column("born_host"))
    assert decoded.column("sys_flag").to_pylist() == [0x30, 0x20, 0x30]


def test_records_of_different_store_hosts_get_their_own_offset_ids() -> None:
    data = encode_records(stored([b"a"]), STORE_HOST) + encode_records(stored([b"b"]), "[::2]:10911")
    decoded = decode_records_to_batch(data)
    assert decoded.column("msg_id").to_pylist() == [
        ids.offset_msg_id(STORE_HOST, 1000),
        ids.offset_msg_id("[::2]:10911", 1000),
    ]


def test_a_stored_v6_bit_is_cleared_for_an_ipv4_host() -> None:
    data = encode_records(stored([b"a"], sys_flags=[sysflag.BORNHOST_V6 | sysflag.MULTI_TAGS]), STORE_HOST)
    assert struct.unpack_from(">i", data, 36)[0] == sysflag.MULTI_TAGS


def test_topics_over_127_bytes_use_magic_v2() -> None:
    long_topic = "T" * 128
    data = encode_records(stored([b"a"], topic="T" * 127), STORE_HOST)
    assert struct.unpack_from(">i", data, 4)[0] == MAGIC_V1
    data = encode_records(stored([b"body"], topic=long_topic), STORE_HOST)
    assert struct.unpack_from(">i", data, 4)[0] == MAGIC_V2
    assert data[88 + 4 : 88 + 4 + 2] == struct.pack(">h", 128)
    (message,) = decode_records(data)
    assert message.topic == long_topic and message.body == b"body"


@pytest.mark.parametrize("compression", [0, sysflag.COMPRESSION_ZLIB])
def test_zlib_bodies_are_decompressed_and_the_bit_cleared(compression: int) -> None:
    body = b"compress me " * 500
    flag = sysflag.COMPRESSED | compression | sysflag.MULTI_TAGS
    data = encode_records(stored([zlib.compress(body, 5), b"plain"], sys_flags=[flag, 0]), STORE_HOST)
    messages = decode_records(data)
    assert [m.body for m in messages] == [body, b"plain"]
    assert messages[0].sys_flag == flag & ~sysflag.COMPRESSED
    assert messages[0].body_crc == zlib.crc32(zlib.compress(body, 5)) & 0x7FFFFFFF
    batch = decode_records_to_batch(data)
    assert batch.column("body").to_pylist() == [body, b"plain"]
    assert batch.column("sys_flag").to_pylist() == [flag & ~sysflag.COMPRESSED, 0]
    raw = decode_records_to_batch(data, decompress=False)
    assert raw.column("body")[0].as_py() == zlib.compress(body, 5)
    assert raw.column("sys_flag")[0].as_py() == flag


@pytest.mark.parametrize(
    ("compression", "name"), [(sysflag.COMPRESSION_LZ4, "LZ4"), (sysflag.COMPRESSION_ZSTD, "ZSTD")]
)
def test_other_compressions_are_refused_by_name(compression: int, name: str) -> None:
    data = encode_records(stored([b"???"], sys_flags=[sysflag.COMPRESSED | compression]), STORE_HOST)
    with pytest.raises(RecordDecodeError, match=name):
        decode_records(data)
    assert decode_records(data, decompress=False)[0].body == b"???"


def test_a_corrupt_zlib_body_is_a_decode_error() -> None:
    data = encode_records(stored([b"not zlib"], sys_flags=[sysflag.COMPRESSED]), STORE_HOST)
    with pytest.raises(RecordDecodeError, match="zlib"):
        decode_records_to_batch(data)


def test_encode_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="STORED_SCHEMA"):
        encode_records(pa.record_batch({"body": [b"x"]}), STORE_HOST)
    with pytest.raises(ValueError, match="not an ip:port"):
        encode_records(stored([b"x"]), "broker:10911")
    with pytest.raises(ValueError, match="not an ip:port"):
        encode_records(stored([b"x"], born_hosts=["10.0.0.1"]), STORE_HOST)
    batch = stored([b"x"])
    body = STORED_SCHEMA.get_field_index("body")
    with pytest.raises(ValueError, match="'body' of a stored batch holds nulls"):
        encode_records(batch.set_column(body, STORED_SCHEMA.field(body), pa.nulls(1, pa.binary())), STORE_HOST)


def test_every_truncation_is_a_decode_error() -> None:
    data = encode_records(stored([b"first", b"second"], ["TAGS\x01a\x02", ""]), STORE_HOST)
    first = struct.unpack_from(">i", data, 0)[0]
    for end in range(1, len(data)):
        if end == first:
            assert len(decode_records(data[:end])) == 1
            continue
        with pytest.raises(RecordDecodeError, match="truncated"):
            decode_records(data[:end])


def _patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    patched = bytearray(data)
    struct.pack_into(fmt, patched, offset, value)
    return bytes(patched)


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "message"),
    [
        (4, ">i", 0x12345678, "unknown MAGICCODE"),
        (0, ">i", 50, "TOTALSIZE 50 is too small"),
        (84, ">i", -1, "body length overruns"),
        (84, ">i", 4000, "body length overruns"),
        (88 + 5 + 1 + 9, ">h", 3, "TOTALSIZE disagrees"),  # the properties length
        (88 + 5 + 1 + 9, ">h", -4, "properties length overruns"),
        (36, ">i", sysflag.BORNHOST_V6 | sysflag.STOREHOST_V6, "too small for its hosts"),
        (88 + 5, ">B", 100, "topic length overruns"),
    ],
)
def test_corrupt_fields_are_decode_errors(offset: int, fmt: str, value: int, message: str) -> None:
    data = encode_records(stored([b"hello"], ["a\x01b\x02"]), STORE_HOST)
    corrupt = _patched(data, offset, fmt, value) + data
    with pytest.raises(RecordDecodeError, match=f"record 0 at byte 0: .*{message}"):
        decode_records(corrupt)
    with pytest.raises(RecordDecodeError):
        decode_records_to_batch(corrupt)


def test_invalid_utf8_is_a_decode_error() -> None:
    data = encode_records(stored([b"hello"], topic="Topic"), STORE_HOST)
    with pytest.raises(RecordDecodeError, match="UTF-8"):
        decode_records(data.replace(b"Topic", b"T\xffpic"))


def test_accepts_a_memoryview() -> None:
    data = encode_records(stored([b"hello", b"world"]), STORE_HOST)
    assert [m.body for m in decode_records(memoryview(b"!" + data)[1:])] == [b"hello", b"world"]


ports = st.integers(0, 65535)
hosts = st.one_of(
    st.builds(lambda ip, port: f"{ipaddress.IPv4Address(ip)}:{port}", st.integers(0, 2**32 - 1), ports),
    st.builds(lambda ip, port: f"[{ipaddress.IPv6Address(ip)}]:{port}", st.integers(0, 2**128 - 1), ports),
)
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=8)
rows = st.lists(
    st.tuples(
        st.binary(max_size=300),
        st.dictionaries(texts, texts, max_size=4),
        hosts,
        st.sampled_from([0, sysflag.MULTI_TAGS, sysflag.TRANSACTION_COMMIT_TYPE]),
    ),
    max_size=20,
)


def stored_rows(rows: list[tuple[bytes, dict[str, str], str, int]], topic: str, store_host: str) -> pa.RecordBatch:
    """`stored` of (body, properties, born host, sys flag) rows."""
    return stored(
        [body for body, *_ in rows],
        [props.encode_properties(p) for _, p, _, _ in rows],
        topic=topic,
        born_hosts=[host for _, _, host, _ in rows],
        sys_flags=[flag for *_, flag in rows],
        store_host=store_host,
    )


@settings(max_examples=60, deadline=None)
@given(rows=rows, topic=st.text(min_size=1, max_size=150), store_host=hosts)
def test_round_trip_property(rows: list[tuple[bytes, dict[str, str], str, int]], topic: str, store_host: str) -> None:
    batch = stored_rows(rows, topic, store_host)
    data = encode_records(batch, store_host)
    decoded = decode_records_to_batch(data)
    v6 = [(sysflag.BORNHOST_V6 if "[" in host else 0) for _, _, host, _ in rows]
    store_v6 = sysflag.STOREHOST_V6 if "[" in store_host else 0
    assert decoded.column("sys_flag").to_pylist() == [f | b | store_v6 for (*_, f), b in zip(rows, v6, strict=True)]
    sys_flag = STORED_SCHEMA.get_field_index("sys_flag")
    expected = batch.set_column(sys_flag, STORED_SCHEMA.field(sys_flag), decoded.column(sys_flag))
    assert decoded.equals(expected)
    messages = decode_records(data)
    assert [m.properties for m in messages] == [p for _, p, _, _ in rows]
    assert [m.store_host for m in messages] == [store_host] * len(rows)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(rows.filter(bool), min_size=1, max_size=6), store_host=hosts, topic=st.text(min_size=1, max_size=150)
)
def test_record_by_record_and_whole_batch_paths_agree(
    rows: list[list[tuple[bytes, dict[str, str], str, int]]], store_host: str, topic: str
) -> None:
    """Over SMALL_RECORDS records go through numpy and Arrow, fewer one at a time: same bytes, same messages."""
    flat = [row for group in rows for row in group]
    flat = (flat * (SMALL_RECORDS // len(flat) + 2))[: SMALL_RECORDS + 1 + len(flat)]
    batch = stored_rows(flat, topic, store_host)
    whole = encode_records(batch, store_host)
    pieces = [encode_records(batch.slice(i, 1), store_host) for i in range(batch.num_rows)]
    assert whole == b"".join(pieces)
    assert decode_records(whole, broker_name="b") == [
        m for piece in pieces for m in decode_records(piece, broker_name="b")
    ]


@settings(max_examples=40, deadline=None)
@given(rows=rows.filter(bool), store_host=hosts, topic=st.text(min_size=1, max_size=150), compress=st.booleans())
def test_a_few_records_at_known_starts_decode_as_the_whole_batch_path(
    rows: list[tuple[bytes, dict[str, str], str, int]], store_host: str, topic: str, compress: bool
) -> None:
    """Up to SMALL_RECORDS records at given starts are read one at a time (a message looked up by its
    offset), more with numpy: the same batch either way, compressed bodies too."""
    flat = (rows * (SMALL_RECORDS // len(rows) + 2))[: SMALL_RECORDS + 1 + len(rows)]
    system = (
        {props.TAGS: "a"},
        {props.KEYS: "k1 k2", props.UNIQ_KEY: "U1"},
        {props.TAGS: "", props.KEYS: "k", props.UNIQ_KEY: ""},
        {},
    )
    flat = [(body, {**p, **system[i % len(system)]}, host, flag) for i, (body, p, host, flag) in enumerate(flat)]
    if compress:
        flat = [(zlib.compress(body), p, host, flag | sysflag.COMPRESSED) for body, p, host, flag in flat]
    data = encode_records(stored_rows(flat, topic, store_host), store_host)
    bounds = record_bounds_array(data)
    for decompress in (False, True):
        whole = decode_records_to_batch(data, decompress=decompress, starts=bounds[:-1])
        one_by_one = [
            decode_records_to_batch(data, decompress=decompress, starts=bounds[i : i + 1]) for i in range(len(flat))
        ]
        assert pa.Table.from_batches(one_by_one).combine_chunks().equals(pa.Table.from_batches([whole]))
        assert decode_records_to_batch(data, decompress=decompress, starts=bounds[1:4]).equals(whole.slice(1, 3))


def test_record_by_record_decoding_fails_as_the_whole_batch_path() -> None:
    record = encode_records(stored([b"hello"]), STORE_HOST)
    many = record * (SMALL_RECORDS + 1)
    for data in (record[:-1], many[:-1], record[:4] + struct.pack(">i", 7) + record[8:]):
        with pytest.raises(RecordDecodeError):
            decode_records(data)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_records_decode_or_fail_cleanly(data: st.DataObject) -> None:
    original = encode_records(stored([b"hello", b"", b"x" * 40], ["TAGS\x01a\x02", "", "k\x01v"]), STORE_HOST)
    mutated = bytearray(original)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(mutated) - 1))
        mutated[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(mutated)))
    try:
        decode_records(bytes(mutated[:cut]))
        decode_records_to_batch(bytes(mutated[:cut]))
    except RecordDecodeError:
        pass


# ---------------------------------------------------------------------------------------------
# batch bodies


def test_decodes_the_batch_the_real_client_sent() -> None:
    (command,) = FrameDecoder().feed(GOLDEN_BATCH.read_bytes())
    # rocketmq==0.4.4 sends batches as SEND_MESSAGE with batch=1, not as SEND_BATCH_MESSAGE
    assert command.code == RequestCode.SEND_MESSAGE
    assert command.language is LanguageCode.CPP
    assert command.ext_fields["batch"] == "1"
    assert command.ext_fields["topic"] == "GoldenBatchTopic"
    entries = decode_batch_body(command.body)
    assert entries.bodies.to_pylist() == [b"first body", b"second body, a bit longer", b"third \xff\xfe binary"]
    assert entries.flags.tolist() == [0, 0, 0]
    decoded = [props.decode_properties(text) for text in entries.properties.to_pylist()]
    assert [p[props.TAGS] for p in decoded] == ["TagA", "TagB", "TagC"]
    assert [p[props.KEYS] for p in decoded] == ["key-1", "key-2", "key-3"]
    assert [p["color"] for p in decoded] == ["red", "green", "blue"]
    uniq_keys = [p[props.UNIQ_KEY] for p in decoded]
    assert len(set(uniq_keys)) == 3 and all(len(key) == 32 for key in uniq_keys)
    # and the client left magic and CRC at 0, as Java's encodeMessage does
    assert command.body[4:12] == bytes(8)
    assert encode_batch_body(entries) == command.body


def test_batch_body_golden_bytes() -> None:
    body = encode_batch_body(BatchColumns.of([(5, b"hi", "a\x01b\x02"), (0, b"", "")]))
    assert body == (
        struct.pack(">iiiii", 22 + 2 + 4, 0, 0, 5, 2)
        + b"hi"
        + struct.pack(">h", 4)
        + b"a\x01b\x02"
        + struct.pack(">iiiiih", 22, 0, 0, 0, 0, 0)
    )
    assert decode_batch_body(body).rows() == [(5, b"hi", "a\x01b\x02"), (0, b"", "")]


@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=64), texts), max_size=10))
def test_batch_body_round_trip(messages: list[tuple[int, bytes, str]]) -> None:
    assert decode_batch_body(encode_batch_body(BatchColumns.of(messages))).rows() == messages


def test_batch_body_rejects_oversized_properties() -> None:
    with pytest.raises(ValueError, match="exceed"):
        encode_batch_body(BatchColumns.of([(0, b"", "x" * 40000)]))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (encode_batch_body(BatchColumns.of([(0, b"hello", "")]))[:-1], "truncated|totalSize"),
        (b"\x00" * 10, "truncated"),
        (struct.pack(">iiiii", 10, 0, 0, 0, 0) + bytes(2), "totalSize 10 is outside"),
        (struct.pack(">iiiii", 27, 0, 0, 0, -1) + bytes(7), "body length -1"),
        (struct.pack(">iiiii", 27, 0, 0, 0, 9) + bytes(7), "body length 9"),
        (struct.pack(">iiiii", 27, 0, 0, 0, 2) + b"hi" + struct.pack(">h", 1) + bytes(3), "disagrees"),
        (struct.pack(">iiiii", 24, 0, 0, 0, 0) + struct.pack(">h", -2) + bytes(2), "disagrees"),
        (struct.pack(">iiiii", 24, 0, 0, 0, 0) + struct.pack(">h", 2) + b"\xff\xfe", "UTF-8"),
    ],
)
def test_malformed_batch_bodies(data: bytes, message: str) -> None:
    with pytest.raises(BatchDecodeError, match=message):
        decode_batch_body(data)
