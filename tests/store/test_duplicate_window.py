"""The duplicate window's tables against a plain dict, including crowded probe chains and expiry."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from broker.store.dedup import DuplicateWindow, key_hashes
from broker.store.key_table import KeyTable, TableShape

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
