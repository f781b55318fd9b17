"""Record bounds found with numpy over large inputs, and records decoded at starts a caller gives."""

from __future__ import annotations

import numpy as np
import pytest

from rocketspark.message.properties import codec as props
from rocketspark.message.records import decoding as record_decoding
from rocketspark.message.records.decoding import RecordDecodeError, decode_records_to_batch, record_bounds_array
from rocketspark.message.records.encoding import encode_records
from rocketspark.message.records.layout import MAGIC_V1
from rocketspark.message.records.scalar import record_bounds
from tests.unit.test_message_codec import STORE_HOST, stored

MAGIC_BYTES = (MAGIC_V1 & 0xFFFFFFFF).to_bytes(4, "big")


def records(count: int, body_of: object = None) -> bytes:
    """`count` records of varied body and properties lengths (over 32 KiB from about 150)."""
    rng = np.random.default_rng(7)
    bodies = [rng.bytes(int(n)) for n in rng.integers(1, 400, count)]
    if callable(body_of):
        bodies = [body_of(i, body) for i, body in enumerate(bodies)]
    properties = [props.encode_properties({props.UNIQ_KEY: f"{i:032X}", "n": "x" * (i % 13)}) for i in range(count)]
    return encode_records(stored(bodies, properties), STORE_HOST)


def test_large_input_bounds_are_the_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    data = records(600)
    assert len(data) > 100_000
    expected = record_bounds(data)
    # found without the per-record loop
    monkeypatch.setattr(record_decoding, "record_bounds", lambda *_: pytest.fail("the loop ran"))
    assert record_bounds_array(data).tolist() == expected
    assert decode_records_to_batch(data).num_rows == 600


def test_magiccode_bytes_inside_bodies_give_the_same_bounds() -> None:
    # a body that holds what looks like a record head (TOTALSIZE, then MAGICCODE) at several places
    fake = (200).to_bytes(4, "big") + MAGIC_BYTES
    data = records(400, lambda i, body: fake + body + fake if i % 3 == 0 else body)
    assert data.count(MAGIC_BYTES) > 400
    bounds = record_bounds_array(data)
    assert bounds.tolist() == record_bounds(data)
    assert decode_records_to_batch(data).num_rows == 400


@pytest.mark.parametrize("cut", [1, 100, 1000])
def test_a_truncated_large_input_fails_as_the_loop_does(cut: int) -> None:
    data = records(400)[:-cut]
    with pytest.raises(RecordDecodeError) as loop:
        record_bounds(data)
    with pytest.raises(RecordDecodeError) as vectorised:
        record_bounds_array(data)
    assert str(vectorised.value) == str(loop.value)


def test_a_wrong_totalsize_in_a_large_input_fails() -> None:
    data = bytearray(records(400))
    at = int(record_bounds_array(bytes(data))[200])
    data[at : at + 4] = (10).to_bytes(4, "big")
    with pytest.raises(RecordDecodeError, match=r"record 200 .* TOTALSIZE 10 is too small"):
        record_bounds_array(bytes(data))


@pytest.mark.parametrize("count", [5, 400])
def test_decoding_at_given_starts_takes_only_those_records(count: int) -> None:
    data = records(count)
    bounds = record_bounds_array(data)
    rows = np.arange(1, count, 3)
    decoded = decode_records_to_batch(data, starts=bounds[rows])
    assert decoded.equals(decode_records_to_batch(data).take(rows))


def test_starts_that_are_not_records_fail() -> None:
    data = records(10)
    bounds = record_bounds_array(data)
    with pytest.raises(RecordDecodeError, match=r"record 1 .* too close to the end"):
        decode_records_to_batch(data, starts=np.array([0, len(data) - 20]))
    with pytest.raises(RecordDecodeError, match=r"record 0 .* overruns the next record"):
        decode_records_to_batch(data, starts=np.array([bounds[2], bounds[2] + 100]))
    with pytest.raises(RecordDecodeError, match="record 0 at byte"):
        decode_records_to_batch(data, starts=np.array([bounds[1] + 8]))
