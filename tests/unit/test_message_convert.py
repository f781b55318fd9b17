"""Conversions between the batch schemas, and the vectorized property codecs they rest on."""

from __future__ import annotations

import datetime as dt
import zlib

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketspark.message import ids, sysflag
from rocketspark.message.batches.columns import decompress_bodies, message_ids, tag_codes
from rocketspark.message.batches.producer import producer_batch
from rocketspark.message.batches.schema import PRODUCER_SCHEMA, SPARK_SCHEMA, STORED_SCHEMA
from rocketspark.message.batches.spark import to_spark_batch
from rocketspark.message.batches.stored import stored_batch_from_producer, stored_batch_from_rows
from rocketspark.message.hashing import java_string_hash
from rocketspark.message.properties import codec as props
from rocketspark.message.properties.columns import (
    PROPERTIES_MAP,
    encode_properties_column,
    map_to_properties,
    properties_to_map,
    property_values,
)

STORE_HOST = "10.0.0.2:10911"
PLACEMENT = {
    "topic": "TopicTest",
    "queue_id": 2,
    "first_queue_offset": 100,
    "first_commit_log_offset": 5000,
    "born_timestamp": 1_700_000_000_000,
    "born_host": "10.0.0.1:5555",
    "store_timestamp": 1_700_000_000_250,
    "store_host": STORE_HOST,
}

texts = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=6)
# property strings as anyone might write them: stray separators, empty pairs, no final 0x02
raw_properties = st.lists(st.sampled_from(["\x01", "\x02", "a", "b", "é", "TAGS", "KEYS"]), max_size=14).map("".join)


def as_pairs(row: list[tuple[str, str]] | None) -> dict[str, str]:
    return dict(row or [])


# ---------------------------------------------------------------------------------------------
# properties


@settings(max_examples=200)
@given(st.lists(st.one_of(st.none(), raw_properties), max_size=12), st.integers(0, 3))
def test_properties_to_map_agrees_with_decode_properties(strings: list[str | None], skip: int) -> None:
    column = pa.array(strings, pa.string()).slice(min(skip, len(strings)))
    mapped = properties_to_map(column)
    assert mapped.type == PROPERTIES_MAP
    assert mapped.null_count == 0
    expected = [props.decode_properties(text or "") for text in column.to_pylist()]
    assert [as_pairs(row) for row in mapped.to_pylist()] == expected
    tags, keys = property_values(column, props.TAGS, props.KEYS)
    assert tags.to_pylist() == [row.get(props.TAGS) for row in expected]
    assert keys.to_pylist() == [row.get(props.KEYS) for row in expected]


def test_properties_to_map_examples() -> None:
    column = pa.array(["a\x01b\x02c\x01d\x02", "", None, "x\x01y", "\x02k\x01v\x01w\x02noval\x02a\x011\x02a\x012"])
    assert properties_to_map(column).to_pylist() == [
        [("a", "b"), ("c", "d")],
        [],
        [],
        [("x", "y")],  # the last pair may lack its 0x02
        [("k", "v\x01w"), ("a", "1"), ("a", "2")],  # only the first 0x01 separates; repeats are kept
    ]
    (a,) = property_values(column, "a")
    assert a.to_pylist() == ["b", None, None, None, "2"]  # the last of repeated keys wins


@given(st.lists(st.one_of(st.none(), st.dictionaries(texts, texts, max_size=4)), max_size=10))
def test_map_to_properties_inverts_properties_to_map(rows: list[dict[str, str] | None]) -> None:
    maps = pa.array([None if row is None else list(row.items()) for row in rows], PROPERTIES_MAP)
    encoded = map_to_properties(maps)
    assert encoded.to_pylist() == [props.encode_properties(row or {}) for row in rows]
    assert properties_to_map(encoded).to_pylist() == [list((row or {}).items()) for row in rows]
    if len(rows) > 2:
        assert map_to_properties(maps.slice(1, 2)).to_pylist() == encoded.slice(1, 2).to_pylist()


def test_map_to_properties_rejects_null_values() -> None:
    maps = pa.array([[("k", None)]], pa.map_(pa.string(), pa.string()))
    with pytest.raises(ValueError, match="null"):
        map_to_properties(maps)


def test_encode_properties_column_merges_the_system_columns() -> None:
    user = pa.array([[("color", "red")], None, []], PROPERTIES_MAP)
    encoded = encode_properties_column(
        user,
        tags=pa.array(["TagA", None, "TagC"]),
        keys=pa.array([None, "k1 k2", None]),
        uniq_key=pa.array(["U1", None, None]),
    )
    assert [props.decode_properties(text) for text in encoded.to_pylist()] == [
        {"color": "red", "TAGS": "TagA", "UNIQ_KEY": "U1"},
        {"KEYS": "k1 k2"},
        {"TAGS": "TagC"},
    ]
    assert encoded[0].as_py() == "color\x01red\x02TAGS\x01TagA\x02UNIQ_KEY\x01U1\x02"
    none = pa.nulls(1, pa.string())
    assert encode_properties_column(None, tags=none, keys=none, uniq_key=none).to_pylist() == [""]


def test_encode_properties_column_refuses_what_a_record_cannot_hold() -> None:
    none = pa.nulls(2, pa.string())
    with pytest.raises(ValueError, match="message 1 take 32769 bytes"):
        encode_properties_column(None, tags=pa.array(["a", "x" * 32763]), keys=none, uniq_key=none)


# ---------------------------------------------------------------------------------------------
# ids, tag codes, bodies


def test_message_ids_only_computes_missing_offset_ids() -> None:
    asked: list[list[int]] = []

    def offset_ids(rows: np.ndarray) -> pa.Array:
        asked.append(rows.tolist())
        return pa.array([f"offset-{row}" for row in rows.tolist()])

    assert message_ids(pa.array(["u0", None, "u2", None]), offset_ids).to_pylist() == [
        "u0",
        "offset-1",
        "u2",
        "offset-3",
    ]
    assert message_ids(pa.array(["u0"]), offset_ids).to_pylist() == ["u0"]
    assert asked == [[1, 3]]


def test_tag_codes_are_java_hash_codes() -> None:
    tags = pa.array(["TagA", None, "", "标签", "a" * 40])
    assert tag_codes(tags).tolist() == [
        java_string_hash("TagA"),
        0,
        0,
        java_string_hash("标签"),
        java_string_hash("a" * 40),
    ]


def test_decompress_bodies() -> None:
    bodies = pa.array([zlib.compress(b"one"), b"two", zlib.compress(b"three")])
    flags = np.array([sysflag.COMPRESSED, sysflag.MULTI_TAGS, sysflag.COMPRESSED | sysflag.COMPRESSION_ZLIB], np.int32)
    plain, cleared = decompress_bodies(bodies, flags)
    assert plain.to_pylist() == [b"one", b"two", b"three"]
    assert cleared.tolist() == [0, sysflag.MULTI_TAGS, sysflag.COMPRESSION_ZLIB]
    assert flags[0] == sysflag.COMPRESSED  # the caller's array is left alone
    with pytest.raises(ValueError, match="message 1 is compressed with ZSTD"):
        decompress_bodies(bodies, np.array([0, sysflag.COMPRESSED | sysflag.COMPRESSION_ZSTD, 0], np.int32))
    with pytest.raises(ValueError, match="unknown type 0x400"):
        decompress_bodies(bodies, np.array([sysflag.COMPRESSED | 0x400, 0, 0], np.int32))


# ---------------------------------------------------------------------------------------------
# producer batches


def test_producer_batch_from_arrow() -> None:
    table = pa.Table.from_batches(
        [
            pa.record_batch({"body": pa.array(["héllo", "b"]), "tags": pa.array(["TagA", ""])}),
            pa.record_batch({"body": pa.array(["c"]), "tags": pa.array([None], pa.string())}),
        ]
    )
    batch = producer_batch(table)
    assert batch.schema.equals(PRODUCER_SCHEMA)
    assert batch.column("body").to_pylist() == ["héllo".encode(), b"b", b"c"]
    assert batch.column("tags").to_pylist() == ["TagA", None, None]  # "" counts as absent
    assert batch.column("keys").null_count == 3 and batch.column("properties").null_count == 3
    record_batch = pa.record_batch(
        {
            "body": pa.array([b"x"], pa.large_binary()),
            "properties": pa.array([[("a", "b")]], pa.map_(pa.string(), pa.string())),
            "uniq_key": pa.array(["U"]).dictionary_encode(),
        }
    )
    batch = producer_batch(record_batch)
    assert batch.column("properties").to_pylist() == [[("a", "b")]]
    assert batch.column("uniq_key").to_pylist() == ["U"]


def test_producer_batch_from_pandas() -> None:
    frame = pd.DataFrame(
        {
            "body": [b"a", b"b", b"c"],
            "keys": ["k1", None, "k3"],
            "properties": [{"color": "red", "size": "L"}, None, {}],
        }
    )
    batch = producer_batch(frame)
    assert batch.schema.equals(PRODUCER_SCHEMA)
    assert batch.column("keys").to_pylist() == ["k1", None, "k3"]
    assert batch.column("properties").to_pylist() == [[("color", "red"), ("size", "L")], None, []]
    # columns of None only, and no rows at all
    batch = producer_batch(pd.DataFrame({"body": ["a"], "tags": [None], "properties": [None]}))
    assert batch.column("tags").to_pylist() == [None] and batch.column("properties").to_pylist() == [None]
    assert producer_batch(pd.DataFrame({"body": pd.Series([], dtype=object)})).num_rows == 0


def test_producer_batch_turns_structs_into_maps() -> None:
    structs = pa.array([{"a": "1", "b": None}, None, {"a": "2", "b": "3"}, {"a": None, "b": None}])
    batch = producer_batch(pa.record_batch({"body": pa.array([b""] * 4), "properties": structs}).slice(0, 4))
    assert batch.column("properties").to_pylist() == [[("a", "1")], None, [("a", "2"), ("b", "3")], []]
    sliced = producer_batch(pa.record_batch({"body": pa.array([b""] * 3), "properties": structs.slice(1)}))
    assert sliced.column("properties").to_pylist() == [None, [("a", "2"), ("b", "3")], []]
    numbers = producer_batch(pa.record_batch({"body": [b""], "properties": pa.array([{"n": 1, "s": "x"}])}))
    assert numbers.column("properties").to_pylist() == [[("n", "1"), ("s", "x")]]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            pa.record_batch({"body": [b"x"], "topic": ["T"]}),
            "body, tags, keys, uniq_key, properties .* got body, topic",
        ),
        (pa.record_batch({"tags": ["T"]}), r"\(body required\); got tags"),
        (pa.record_batch({"body": pa.array([b"x", None])}), "body must not be null .row 1."),
        (pa.record_batch({"body": pa.array([1])}), "body must be binary or string"),
        (pa.record_batch({"body": [b"x"], "tags": pa.array([[1]])}), "'tags' must hold strings"),
        (pa.record_batch({"body": [b"x"], "properties": pa.array(["a"])}), "map or struct"),
        (
            pa.record_batch({"body": [b"x"], "properties": pa.array([[("TAGS", "t")]], PROPERTIES_MAP)}),
            r"system keys \['TAGS'\]",
        ),
        (
            pa.record_batch(
                {"body": [b"x"], "properties": pa.array([[("k", None)]], pa.map_(pa.string(), pa.string()))}
            ),
            "must not be null",
        ),
    ],
)
def test_producer_batch_rejects(data: pa.RecordBatch, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        producer_batch(data)


def test_producer_batch_rejects_other_types() -> None:
    with pytest.raises(TypeError, match="pandas DataFrame"):
        producer_batch([{"body": b"x"}])


# ---------------------------------------------------------------------------------------------
# stored batches


def test_stored_batch_from_producer() -> None:
    producer = producer_batch(
        pa.record_batch(
            {
                "body": [b"a", b"b", b"c"],
                "tags": ["TagA", None, "TagC"],
                "keys": [None, "k1 k2", None],
                "uniq_key": ["U0", None, "U2"],
                "properties": pa.array([[("color", "red")], None, []], PROPERTIES_MAP),
            }
        )
    )
    stored = stored_batch_from_producer(producer, **PLACEMENT, flag=4, sys_flag=sysflag.MULTI_TAGS)  # type: ignore[arg-type]
    assert stored.schema.equals(STORED_SCHEMA)
    assert stored.column("topic").to_pylist() == ["TopicTest"] * 3
    assert stored.column("queue_id").to_pylist() == [2] * 3
    assert stored.column("queue_offset").to_pylist() == [100, 101, 102]
    assert stored.column("commit_log_offset").to_pylist() == [5000, 5001, 5002]
    assert stored.column("msg_id").to_pylist() == ["U0", ids.offset_msg_id(STORE_HOST, 5001), "U2"]
    assert stored.column("tags").to_pylist() == ["TagA", None, "TagC"]
    assert stored.column("keys").to_pylist() == [None, "k1 k2", None]
    assert stored.column("flag").to_pylist() == [4] * 3
    assert stored.column("sys_flag").to_pylist() == [sysflag.MULTI_TAGS] * 3
    assert stored.column("born_host").to_pylist() == ["10.0.0.1:5555"] * 3
    assert stored.column("reconsume_times").to_pylist() == [0] * 3
    assert [props.decode_properties(text) for text in stored.column("properties").to_pylist()] == [
        {"color": "red", "TAGS": "TagA", "UNIQ_KEY": "U0"},
        {"KEYS": "k1 k2"},
        {"TAGS": "TagC", "UNIQ_KEY": "U2"},
    ]


def test_stored_batch_from_rows_assigns_offsets_and_ids() -> None:
    properties = ["TAGS\x01TagA\x02UNIQ_KEY\x01U0\x02WAIT\x01true\x02", "KEYS\x01k\x02", ""]
    stored = stored_batch_from_rows(
        topics=["TopicTest", "TopicTest", "Other"],
        queue_ids=[1, 1, 0],
        queue_offsets=[7, 8, 0],
        first_commit_log_offset=900,
        store_timestamp=2,
        store_host=STORE_HOST,
        bodies=[b"a", b"b", b"c"],
        properties=properties,
        tags=["TagA", None, None],
        keys=[None, "k", None],
        uniq_keys=["U0", None, None],
        flags=[0, 1, 2],
        sys_flags=[0, 0, sysflag.COMPRESSED],
        born_timestamps=[1, 1, 1],
        born_hosts=["10.0.0.1:1", "10.0.0.1:2", "[::1]:3"],
        reconsume_times=[0, 0, 5],
    )
    assert stored.schema.equals(STORED_SCHEMA)
    assert stored.column("msg_id").to_pylist() == [
        "U0",
        ids.offset_msg_id(STORE_HOST, 901),
        ids.offset_msg_id(STORE_HOST, 902),
    ]
    assert stored.column("tags").to_pylist() == ["TagA", None, None]
    assert stored.column("keys").to_pylist() == [None, "k", None]
    assert stored.column("properties").to_pylist() == properties
    assert stored.column("topic").to_pylist() == ["TopicTest", "TopicTest", "Other"]
    assert stored.column("queue_id").to_pylist() == [1, 1, 0]
    assert stored.column("queue_offset").to_pylist() == [7, 8, 0]
    assert stored.column("commit_log_offset").to_pylist() == [900, 901, 902]


# ---------------------------------------------------------------------------------------------
# Spark


def test_to_spark_batch() -> None:
    producer = producer_batch(
        pa.record_batch(
            {
                "body": [b"a", zlib.compress(b"big body")],
                "tags": ["TagA", None],
                "properties": pa.array([[("color", "red")], None], PROPERTIES_MAP),
            }
        )
    )
    stored = stored_batch_from_producer(producer, **PLACEMENT)  # type: ignore[arg-type]
    sys_flag = STORED_SCHEMA.get_field_index("sys_flag")
    stored = stored.set_column(sys_flag, STORED_SCHEMA.field(sys_flag), pa.array([0, sysflag.COMPRESSED], pa.int32()))
    spark = to_spark_batch(stored, "broker-a")
    assert spark.schema.equals(SPARK_SCHEMA)
    row = spark.to_pylist()[0]
    assert row["brokerName"] == "broker-a"
    assert row["queueId"] == 2 and row["queueOffset"] == 100
    assert row["msgId"] == ids.offset_msg_id(STORE_HOST, 5000)
    assert row["bornTimestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    assert row["storeTimestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, 250_000, tzinfo=dt.UTC)
    assert row["bornHost"] == "10.0.0.1:5555"
    assert row["properties"] == [("color", "red"), ("TAGS", "TagA")]
    assert spark.column("body").to_pylist() == [b"a", b"big body"]  # decompressed
    assert spark.column("tags").to_pylist() == ["TagA", None]


def test_to_spark_batch_of_an_empty_slice() -> None:
    stored = stored_batch_from_producer(producer_batch(pa.record_batch({"body": [b"a"]})), **PLACEMENT)  # type: ignore[arg-type]
    spark = to_spark_batch(stored.slice(1), "broker-a")
    assert spark.num_rows == 0 and spark.schema.equals(SPARK_SCHEMA)


def test_to_spark_batch_rejects_other_schemas() -> None:
    with pytest.raises(ValueError, match="STORED_SCHEMA"):
        to_spark_batch(pa.record_batch({"body": [b"x"]}), "broker-a")


def test_spark_reads_the_spark_schema_back_unchanged() -> None:
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    # Spark writes timestamps in the session time zone; the source runs its sessions in UTC
    assert to_arrow_schema(from_arrow_schema(SPARK_SCHEMA), timezone="UTC").equals(SPARK_SCHEMA)
