"""The duplicate window's tables against a plain dict, including crowded probe chains and expiry."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store.duplicates.key_table import KeyTable, TableShape
from broker.store.duplicates.round_check import SMALL_ROUND
from broker.store.duplicates.window import DuplicateWindow, key_hash, key_hashes
from rocketspark.message.batches.producer import producer_batch
from tests.store.conftest import StoreFactory, message

U64 = np.uint64


def test_key_table_finds_what_it_holds_even_when_every_key_shares_a_slot() -> None:
    shape = TableShape(100)
    table = KeyTable(shape, np.zeros(shape.filter_words, np.uint64))
    crowded = (np.arange(100, dtype=U64) << U64(40)) | U64(7)  # same low bits: one long probe chain
    table.insert(1_000, shape.probe(crowded[:60]), np.arange(60), np.arange(60) * 10, np.arange(60) * 100)
    table.insert(2_000, shape.probe(crowded[60:]), np.arange(40), np.arange(40) * 10, np.arange(40) * 100)
    rows, entries = table.find(shape.probe(crowded), cutoff_ms=0)
    assert rows.tolist() == list(range(100))
    assert (table.hashes[entries] == crowded).all()
    assert table.find(shape.probe(crowded), cutoff_ms=1_500)[0].tolist() == list(range(60, 100))
    assert not len(table.find(shape.probe(crowded + U64(1 << 20)), cutoff_ms=0)[0])


def test_window_agrees_with_a_dict_and_keeps_at_least_max_keys() -> None:
    rng = np.random.default_rng(7)
    window = DuplicateWindow(window_seconds=600, max_keys=1_000)
    reference: dict[int, int] = {}
    now = 1_000_000
    for round_number in range(60):
        hashes = rng.integers(0, 3_000, size=64).astype(U64)  # many repeats across rounds
        found = window.lookup(hashes, now)
        for h, hit, clo in zip(hashes.tolist(), found.hit.tolist(), found.commit_log_offsets.tolist(), strict=True):
            assert not hit or clo == reference[h]  # a hit names the first copy
            if h in reference and reference[h] >= round_number * 64 - 900:  # among the newest 1,000 keys
                assert hit
        new = np.unique(hashes[~found.hit])
        offsets = np.arange(len(new)) + round_number * 64
        window.add(now, new, np.zeros(len(new), np.int32), offsets, offsets)
        reference.update(zip(new.tolist(), offsets.tolist(), strict=True))
        assert len(window) <= 1_500
        now += 10


def test_keys_leave_the_window_with_time() -> None:
    window = DuplicateWindow(window_seconds=1, max_keys=100)
    keys = np.array([11, 12], dtype=U64)
    window.add(5_000, keys, np.zeros(2, np.int32), np.arange(2), np.arange(2))
    assert window.lookup(keys, 5_999).hit.all()
    assert not window.lookup(keys, 6_001).hit.any()


def test_a_key_hashes_the_same_in_any_round() -> None:
    """Sends of one key length hash their keys as a matrix, mixed rounds word by word: same hashes."""
    ids = [f"{i:032X}" for i in range(50)]
    alone, _ = key_hashes(["T"], [50], pa.array(ids))
    mixed, present = key_hashes(["T", "U"], [52, 2], pa.array([None, "", *ids, "short", ids[0]]))
    assert present.tolist() == [False, False] + [True] * 52
    assert (mixed[2:52] == alone).all()
    assert mixed[53] != alone[0]  # the same key for another topic


@settings(max_examples=80, deadline=None)
@given(topic=st.text(min_size=1, max_size=40), keys=st.lists(st.text(min_size=1, max_size=70), min_size=1, max_size=20))
def test_one_key_hashes_as_a_round_of_keys(topic: str, keys: list[str]) -> None:
    """Small rounds hash their keys one at a time in Python: the same hashes as numpy's."""
    hashes, _ = key_hashes([topic], [len(keys)], pa.array(keys))
    assert [key_hash(topic, key) for key in keys] == hashes.tolist()


def test_one_key_at_a_time_finds_and_stores_as_the_vectorised_table() -> None:
    shape = TableShape(100)
    table = KeyTable(shape, np.zeros(shape.filter_words, np.uint64))
    crowded = (np.arange(100, dtype=U64) << U64(40)) | U64(7)  # one long probe chain
    for i, h in enumerate(crowded[:50].tolist()):  # one at a time ...
        table.insert_one(1_000, h, shape.probe_one(h), (i, i * 10, i * 100))
    table.insert(2_000, shape.probe(crowded[50:]), np.arange(50), np.arange(50) * 10, np.arange(50) * 100)
    rows, entries = table.find(shape.probe(crowded), cutoff_ms=0)  # ... found together, and the other way round
    assert rows.tolist() == list(range(100))
    assert [table.find_one(h, shape.probe_one(h), 0) for h in crowded.tolist()] == entries.tolist()
    assert [table.find_one(h, shape.probe_one(h), 1_500) >= 0 for h in crowded.tolist()] == [False] * 50 + [True] * 50
    missing = int(crowded[0]) + (1 << 20)
    assert table.find_one(missing, shape.probe_one(missing), 0) == -1


def test_window_one_key_at_a_time_agrees_with_whole_rounds() -> None:
    rng = np.random.default_rng(11)
    together = DuplicateWindow(window_seconds=600, max_keys=200)
    alone = DuplicateWindow(window_seconds=600, max_keys=200)
    now = 1_000_000
    for round_number in range(40):
        hashes = np.unique(rng.integers(0, 600, size=12).astype(U64))
        found = together.lookup(hashes, now)
        one_by_one = [alone.lookup_one(h, now) for h in hashes.tolist()]
        assert [s is not None for s in one_by_one] == found.hit.tolist()
        assert [s for s in one_by_one if s is not None] == [found.at(int(j)) for j in np.flatnonzero(found.hit)]
        new = hashes[~found.hit]
        offsets = np.arange(len(new)) + round_number * 100
        together.add(now, new, np.zeros(len(new), np.int32), offsets, offsets + 7)
        for h, offset in zip(new.tolist(), offsets.tolist(), strict=True):
            alone.add_one(now, h, (0, offset, offset + 7))
        assert len(together) == len(alone)
        now += 10


@pytest.mark.parametrize("size", [4, SMALL_ROUND + 4])
async def test_rounds_small_and_large_drop_the_same_duplicates(open_store: StoreFactory, size: int) -> None:
    """A batch repeating a stored key and one of its own: stored once each, whichever path checks it."""
    store = await open_store(duplicate_window_seconds=600)
    first = await store.put_messages("T", 0, [message(b"K-0", uniq="K-0")])
    keys = [f"K-{i % (size - 2)}" for i in range(size)]  # K-0 is stored already; two keys repeat
    result = await store.put_messages("T", 0, [message(key.encode(), uniq=key) for key in keys])
    assert result.duplicates == 3
    offsets = result.commit_log_offsets
    assert offsets[0] == first.first_commit_log_offset
    assert offsets[size - 2] == offsets[0] and offsets[size - 1] == offsets[1]
    stored = await store.get_messages("T", 0, 0, max_messages=100, max_bytes=1 << 20)
    bodies = [b for batch in stored.batches() for b in batch.column("body").to_pylist()]
    assert bodies == [b"K-0", *(k.encode() for k in keys[1 : size - 2])]


@pytest.mark.parametrize("size", [4, SMALL_ROUND + 4])
@pytest.mark.parametrize("arrow", [False, True])
async def test_one_key_on_different_bodies_is_not_a_duplicate(open_store: StoreFactory, size: int, arrow: bool) -> None:
    """Some clients give two messages one UNIQ_KEY: only a row whose body is the first copy's too
    is a resend. The others are stored; the key keeps naming the first copy."""
    store = await open_store(duplicate_window_seconds=600)
    await store.put_messages("T", 0, [message(b"first", uniq="K-0")])
    rows = [("K-0", b"other"), ("K-0", b"first"), ("K-1", b"a"), ("K-1", b"b"), ("K-1", b"a")]
    rows += [(f"F-{i}", b"filler") for i in range(size - 4)]
    if arrow:
        batch = pa.record_batch({"body": [b for _, b in rows], "uniq_key": [k for k, _ in rows]})
        result = await store.put_arrow("T", 0, producer_batch(batch), born_timestamp=1, born_host="127.0.0.1:1")
    else:
        result = await store.put_messages("T", 0, [message(b, uniq=k) for k, b in rows])
    assert result.duplicates == 2  # K-0 "first" (stored before) and the second K-1 "a" (this round)
    resent = await store.put_messages("T", 0, [message(b"first", uniq="K-0")])
    assert resent.duplicates == 1
    stored = await store.get_messages("T", 0, 0, max_messages=100, max_bytes=1 << 20)
    bodies = [b for batch in stored.batches() for b in batch.column("body").to_pylist()]
    assert bodies == [b"first", b"other", b"a", b"b", *[b"filler"] * (size - 4)]


def fill(window: DuplicateWindow, at_ms: int, first_key: int, count: int) -> None:
    """Store `count` new keys at `at_ms`."""
    hashes = np.arange(first_key, first_key + count, dtype=U64) * U64(0x9E3779B97F4A7C15)
    offsets = np.arange(first_key, first_key + count)
    window.add(at_ms, hashes, np.zeros(count, np.int32), offsets, offsets)


def short_window_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "broker.store.duplicates.window" and r.levelno == logging.WARNING
    ]


def test_keys_pushed_out_before_the_window_ends_are_warned_about_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At most 1.5 x max_keys keys are kept: 50 keys a second with max_keys=100 push keys out after
    3 s, not 600 s. The broker says so, naming both windows, once a minute rather than once a key."""
    window = DuplicateWindow(window_seconds=600, max_keys=100)  # tables of 50 keys, at most three
    start = 1_000_000
    with caplog.at_level(logging.WARNING, logger="broker.store.duplicates.window"):
        for second in range(3):
            fill(window, start + second * 1_000, second * 50, 50)
        assert short_window_warnings(caplog) == []  # nothing has left yet
        for second in range(3, 30):
            fill(window, start + second * 1_000, second * 50, 50)  # a table of 50 keys leaves each second
        assert len(short_window_warnings(caplog)) == 1
        fill(window, start + 62_000, 62 * 50, 50)  # 59 s after the first warning: the table of 27 s leaves
        assert len(short_window_warnings(caplog)) == 1
        for second in (63, 64):  # a minute after it: the tables of 28 s and 29 s leave
            fill(window, start + second * 1_000, second * 50, 50)
    first, again = short_window_warnings(caplog)
    assert "3.0 s" in first and "duplicateWindowSeconds=600" in first and "duplicateWindowMaxKeys=100" in first
    assert "50 keys" in first
    assert "35.0 s" in again and "1,400 keys" in again  # the tables of 1 s to 28 s left early since the first


def test_keys_that_leave_once_the_window_passed_are_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    window = DuplicateWindow(window_seconds=1, max_keys=100)
    with caplog.at_level(logging.WARNING, logger="broker.store.duplicates.window"):
        for step in range(10):
            fill(window, 1_000_000 + step * 1_100, step * 50, 50)
    assert short_window_warnings(caplog) == []


async def test_the_store_warns_when_its_sends_outrun_the_window(
    open_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    store = await open_store(duplicate_window_seconds=600, duplicate_window_max_keys=64)
    with caplog.at_level(logging.WARNING, logger="broker.store.duplicates.window"):
        for send in range(10):
            await store.put_messages("T", 0, [message(b"m", uniq=f"K-{send}-{i}") for i in range(32)])
    (warning,) = short_window_warnings(caplog)
    assert "duplicateWindowSeconds=600" in warning and "duplicateWindowMaxKeys=64" in warning


@pytest.mark.parametrize("size", [2, SMALL_ROUND + 4])
async def test_a_send_repeating_another_send_of_its_round_is_answered_with_that_rows_place(
    open_store: StoreFactory, size: int
) -> None:
    """Two sends of one round (nothing awaited between them): the second repeats the first's last
    row only, or every row. Either is answered with the first send's rows, stored once."""
    store = await open_store(duplicate_window_seconds=600)
    first_rows = [message(b"m-%d" % i, uniq=f"R-{i}") for i in range(size)]
    sends = [
        store.put_messages("T", 0, first_rows),
        store.put_messages("T", 1, [first_rows[-1], message(b"fresh", uniq="R-new")]),
        store.put_messages("T", 1, first_rows),
    ]
    first, partly, wholly = await asyncio.gather(*sends)
    assert (first.count, first.duplicates) == (size, 0)
    assert (partly.count, partly.duplicates) == (1, 1)
    assert partly.commit_log_offsets[0] == first.commit_log_offsets[-1]
    assert (partly.queue_id, partly.first_queue_offset) == (1, 0)  # its own stored row
    assert (wholly.count, wholly.duplicates) == (0, size)
    assert wholly.commit_log_offsets == tuple(first.commit_log_offsets)
    assert (wholly.queue_id, wholly.first_queue_offset) == (0, first.first_queue_offset)  # row 0's first copy
    stored = await store.get_messages("T", 1, 0, max_messages=100, max_bytes=1 << 20)
    assert [b for batch in stored.batches() for b in batch.column("body").to_pylist()] == [b"fresh"]
