"""The columnar standard codecs against per-message ones, on random messages.

- the SEND_BATCH_MESSAGE body: :func:`encode_batch_body` against the layout of reference §4.5 packed
  one message at a time, and :func:`decode_batch_body` back;
- the broker's standard batch path: a batch body taken apart by `read_standard_batch`, stored as
  `stored_batch_from_producer` stores it and encoded for a pull by `encode_records`, against
  `encode_record` of each message (the per-message record codec), then decoded again both ways;
- the client's standard send of Arrow rows: properties built by `encode_properties_column` against
  `encode_properties` of each row;
- delay levels and transactional messages refused in a batch exactly when the per-message checks
  find them.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.processors.send_batch import read_standard_batch
from rocketspark.errors import ValidationError
from rocketspark.message import sysflag
from rocketspark.message.batches.schema import PRODUCER_SCHEMA
from rocketspark.message.batches.stored import stored_batch_from_producer
from rocketspark.message.properties import codec as props
from rocketspark.message.properties.columns import encode_properties_column
from rocketspark.message.records.batch_body import BatchColumns, decode_batch_body, encode_batch_body
from rocketspark.message.records.decoding import decode_records_to_batch
from rocketspark.message.records.encoding import encode_records
from rocketspark.message.records.scalar import encode_record, record_bounds, stored_rows
from rocketspark.message.validation import delay_level_of

MAX_BODY = 4 * 1024 * 1024
BORN_HOST = "10.1.2.3:50001"
STORE_HOST = "192.168.0.7:10911"
SYS_FLAGS = [0, sysflag.MULTI_TAGS, sysflag.TRANSACTION_COMMIT_TYPE]

# any text but the two separators of a properties string (which no encoder can carry)
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=12)
optional = st.one_of(st.none(), texts)
user_properties = st.dictionaries(texts.filter(lambda k: k not in props.SYSTEM_KEYS and k != ""), texts, max_size=4)
bodies = st.one_of(st.binary(min_size=1, max_size=64), st.binary(min_size=1, max_size=5000))


@st.composite
def messages(draw: st.DrawFn, *, min_size: int = 1) -> list[tuple[int, bytes, dict[str, str]]]:
    """(flag, body, properties) messages: a batch of 1, a few, or thousands (copies of a few)."""
    drawn = draw(
        st.lists(
            st.tuples(
                st.integers(-(2**31), 2**31 - 1),
                bodies,
                st.fixed_dictionaries(
                    {},
                    optional={
                        props.TAGS: texts,
                        props.KEYS: texts,
                        props.UNIQ_KEY: texts,
                        props.WAIT_STORE_MSG_OK: st.sampled_from(["true", "false"]),
                    },
                ),
                user_properties,
            ),
            min_size=min_size,
            max_size=20,
        )
    )
    size = draw(st.sampled_from([len(drawn), len(drawn), 1, 3000]))
    copies = (drawn * (size // max(len(drawn), 1) + 1))[:size] if drawn else []
    return [(flag, body, {**user, **system}) for flag, body, system, user in copies]


def per_message_body(entries: list[tuple[int, bytes, str]]) -> bytes:
    """The batch body packed one message at a time, as reference §4.5 lays it out."""
    out = b""
    for flag, body, properties in entries:
        encoded = properties.encode()
        out += struct.pack(">iiiii", 22 + len(body) + len(encoded), 0, 0, flag, len(body))
        out += body + struct.pack(">h", len(encoded)) + encoded
    return out


def as_entries(drawn: list[tuple[int, bytes, dict[str, str]]]) -> list[tuple[int, bytes, str]]:
    return [(flag, body, props.encode_properties(p)) for flag, body, p in drawn]


@settings(max_examples=60, deadline=None)
@given(drawn=messages(min_size=0))
def test_batch_body_codec_agrees_with_the_per_message_layout(drawn: list[tuple[int, bytes, dict[str, str]]]) -> None:
    entries = as_entries(drawn)
    body = encode_batch_body(BatchColumns.of(entries))
    assert body == per_message_body(entries)
    assert decode_batch_body(body).rows() == entries
    if entries:  # a slice encodes as its part of the whole
        middle = len(entries) // 2
        assert encode_batch_body(BatchColumns.of(entries).slice(middle, len(entries))) == per_message_body(
            entries[middle:]
        )


@settings(max_examples=40, deadline=None)
@given(
    drawn=messages(),
    sys_flag=st.sampled_from([0, sysflag.MULTI_TAGS, sysflag.TRANSACTION_COMMIT_TYPE]),
    reconsume=st.integers(0, 16),
)
def test_stored_standard_batch_pulls_as_per_message_records(
    drawn: list[tuple[int, bytes, dict[str, str]]], sys_flag: int, reconsume: int
) -> None:
    """Body -> broker batch -> stored batch -> pull body, against encode_record of every message."""
    entries = as_entries(drawn)
    taken = read_standard_batch(per_message_body(entries), max_message_size=MAX_BODY, sys_flag=sys_flag, timers=True)
    assert taken.wait_store_ok == all(p.get(props.WAIT_STORE_MSG_OK) != "false" for *_, p in drawn)
    for name, key in (("tags", props.TAGS), ("keys", props.KEYS), ("uniq_key", props.UNIQ_KEY)):
        assert taken.batch.column(name).to_pylist() == [p.get(key) or None for *_, p in drawn]
    stored = stored_batch_from_producer(
        taken.batch,
        topic="Topic",
        queue_id=3,
        first_queue_offset=100,
        first_commit_log_offset=5000,
        born_timestamp=1_700_000_000_123,
        born_host=BORN_HOST,
        store_timestamp=1_700_000_000_456,
        store_host=STORE_HOST,
        properties=taken.columns.properties,
        flag=taken.columns.flags,
        sys_flag=sys_flag,
        reconsume_times=reconsume,
    )
    pulled = encode_records(stored, STORE_HOST)
    expected = [
        encode_record(
            topic="Topic",
            queue_id=3,
            queue_offset=100 + i,
            commit_log_offset=5000 + i,
            body=body,
            properties=properties,
            flag=flag,
            sys_flag=sys_flag,
            born_timestamp=1_700_000_000_123,
            born_host=BORN_HOST,
            store_timestamp=1_700_000_000_456,
            store_host=STORE_HOST,
            reconsume_times=reconsume,
        )
        for i, (flag, body, properties) in enumerate(entries)
    ]
    assert pulled == b"".join(expected)
    # and the client's columnar decoding of the pull body agrees with the per-record one
    decoded = decode_records_to_batch(pulled, decompress=False)
    bounds = record_bounds(pulled)
    assert decoded.to_pylist() == stored_rows(pulled, bounds[:-1], decompress=False)
    assert decoded.column("properties").to_pylist() == [p for _, _, p in entries]


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.tuples(bodies, optional, optional, optional, user_properties), min_size=1, max_size=30),
)
def test_properties_of_arrow_rows_as_each_message_encodes_them(
    rows: list[tuple[bytes, str | None, str | None, str | None, dict[str, str]]],
) -> None:
    """The sink's rows sent as standard batches carry what a message-by-message send would."""
    columns = list(zip(*rows, strict=True))
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(columns[0], pa.binary()),
            pa.array(columns[1], pa.string()),
            pa.array(columns[2], pa.string()),
            pa.array(columns[3], pa.string()),
            pa.array([list(p.items()) for p in columns[4]], PRODUCER_SCHEMA.field("properties").type),
        ],
        schema=PRODUCER_SCHEMA,
    )
    encoded = encode_properties_column(
        batch.column("properties"),
        tags=batch.column("tags"),
        keys=batch.column("keys"),
        uniq_key=batch.column("uniq_key"),
    )
    flags = np.zeros(len(rows), dtype=np.int32)
    body = encode_batch_body(BatchColumns(flags, batch.column("body"), encoded))
    expected = []
    for data, tags, keys, uniq_key, user in rows:
        system = {props.TAGS: tags, props.KEYS: keys, props.UNIQ_KEY: uniq_key}
        expected.append(
            (0, data, props.encode_properties({**user, **{k: v for k, v in system.items() if v is not None}}))
        )
    assert body == per_message_body(expected)


@settings(max_examples=60, deadline=None)
@given(
    delay=st.one_of(st.none(), st.integers(-3, 20).map(str), st.sampled_from(["", " 2", "x", "1.5", "-0"])),
    half=st.one_of(st.none(), st.sampled_from(["true", "TRUE", "false", ""])),
    copies=st.sampled_from([1, 2, 500]),
)
def test_a_batch_is_refused_exactly_when_a_message_check_would(
    delay: str | None, half: str | None, copies: int
) -> None:
    system = {k: v for k, v in ((props.DELAY_TIME_LEVEL, delay), (props.TRANSACTION_PREPARED, half)) if v is not None}
    entries = [(0, b"first", "")] + [(0, b"body", props.encode_properties(system))] * copies
    try:
        level = delay_level_of(system)
    except ValidationError:
        level = -1
    refused = level != 0 or (half or "").lower() == "true"
    if refused:
        with pytest.raises(ValidationError):
            read_standard_batch(per_message_body(entries), max_message_size=MAX_BODY, sys_flag=0, timers=True)
    else:
        taken = read_standard_batch(per_message_body(entries), max_message_size=MAX_BODY, sys_flag=0, timers=True)
        assert taken.batch.num_rows == copies + 1


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([], "no message"),
        ([(0, b"ok", ""), (0, b"", "")], "empty"),
        ([(0, b"x" * 11, "")], "maxMessageSize"),
        ([(0, b"x", props.encode_properties({props.TIMER_DELIVER_MS: "1"}))], "timer"),
    ],
)
def test_bad_batches_are_refused_whole(entries: list[tuple[int, bytes, str]], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        read_standard_batch(per_message_body(entries), max_message_size=10, sys_flag=0, timers=True)
