"""The choice of a pull's consume-queue entries (broker/store/queues/entry_selection.py), against a
plain Python reading of the same rules."""

from __future__ import annotations

import numpy as np
import pytest

from broker.store.queues.consume_queue import CQ_ENTRY
from broker.store.queues.entry_selection import by_stored_batch, live_entries, select_entries


def entries(positions: list[int], sizes: list[int] | None = None, tags: list[int] | None = None) -> np.ndarray:
    n = len(positions)
    result = np.zeros(n, dtype=CQ_ENTRY)
    result["batch_pos"] = positions
    result["row"] = np.arange(n)
    result["size"] = sizes if sizes is not None else [10] * n
    result["tags_code"] = tags if tags is not None else [0] * n
    return result


def test_without_a_filter_the_limits_cut_and_the_pull_gets_past_the_last_entry_taken() -> None:
    scanned = entries([0] * 10, sizes=[10] * 10)
    taken, past = select_entries(scanned, None, max_messages=4, max_bytes=10**6, message_overhead=0)
    assert taken["row"].tolist() == [0, 1, 2, 3] and past == 4
    taken, past = select_entries(scanned, None, max_messages=32, max_bytes=35, message_overhead=2)
    assert taken["row"].tolist() == [0, 1] and past == 2  # 12 + 12 fit in 35, a third does not
    taken, past = select_entries(scanned, None, max_messages=32, max_bytes=10**6, message_overhead=0)
    assert len(taken) == 10 and past == 10


def test_one_entry_is_taken_even_past_the_byte_limit() -> None:
    taken, past = select_entries(
        entries([0, 0], sizes=[100, 1]), None, max_messages=5, max_bytes=10, message_overhead=0
    )
    assert taken["row"].tolist() == [0] and past == 1


def test_a_tag_filter_skips_entries_and_the_pull_gets_past_what_it_scanned_or_the_last_taken() -> None:
    scanned = entries([0] * 8, tags=[1, 2, 1, 2, 1, 2, 2, 2])
    taken, past = select_entries(scanned, frozenset({1}), max_messages=32, max_bytes=10**6, message_overhead=0)
    assert taken["row"].tolist() == [0, 2, 4] and past == 8  # every match taken: past the whole scan
    taken, past = select_entries(scanned, frozenset({1}), max_messages=2, max_bytes=10**6, message_overhead=0)
    assert taken["row"].tolist() == [0, 2] and past == 3
    taken, past = select_entries(scanned, frozenset({9}), max_messages=2, max_bytes=10**6, message_overhead=0)
    assert len(taken) == 0 and past == 8


def test_entries_of_deleted_segments_are_the_prefix_left_out() -> None:
    assert live_entries(entries([0, 0, 100, 100, 200]), 100)["batch_pos"].tolist() == [100, 100, 200]
    assert len(live_entries(entries([0, 50]), 100)) == 0


@pytest.mark.parametrize("n", [5, 300, 5000], ids=["few", "just-past-python", "many"])
def test_entries_split_into_runs_of_one_stored_batch(n: int) -> None:
    rng = np.random.default_rng(n)
    positions = np.cumsum(rng.integers(0, 2, n)) * 1000
    expected: list[tuple[int, list[int]]] = []
    for row, position in enumerate(positions.tolist()):
        if expected and expected[-1][0] == position:
            expected[-1][1].append(row)
        else:
            expected.append((position, [row]))
    got = [(position, rows.tolist()) for position, rows in by_stored_batch(entries(positions.tolist()))]
    assert got == expected
    assert by_stored_batch(entries([7] * n))[0][0] == 7 and len(by_stored_batch(entries([7] * n))) == 1
