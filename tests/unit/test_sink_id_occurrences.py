"""A task's deterministic ids number rows of identical content by their occurrence across all the
task's batches (rocketspark/spark/sink/ids.py): the same numbers as counting every hash seen so far."""

from __future__ import annotations

from collections import Counter

import numpy as np

from rocketspark.spark.sink.ids import IdScope


def test_occurrences_count_every_earlier_row_of_the_same_hash_across_batches() -> None:
    rng = np.random.default_rng(7)
    scope = IdScope(("txn", "app", "1"), 0)
    seen: Counter[int] = Counter()
    for size in [1, 5, 300, 2, 1_000, 17, 4_096, 3, 800, 64] * 3:  # runs of every length merge
        hashes = rng.integers(0, 50, size, dtype=np.uint64)  # many repeats, within and across batches
        expected = []
        for value in hashes.tolist():
            expected.append(seen[value])
            seen[value] += 1
        assert scope.occurrences(hashes).tolist() == expected
