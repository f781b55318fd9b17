"""Which consume-queue entries a pull answers with, and the stored batches they point into.

Pure functions over arrays of `CQ_ENTRY` (broker/store/queues/consume_queue.py), in the order a queue
holds them: that order follows the commit log, so an entry's stored batch position never falls
as its offset rises. Most standard pulls take a few dozen entries, where each numpy call costs
more than the work it does, so the common shapes avoid them: slices instead of index arrays when
no tag filter applies, and Python to find where the stored batch changes among a few entries.
"""

from __future__ import annotations

import itertools

import numpy as np

#: entries split into their stored batches in Python up to this many (numpy beyond)
_SPLIT_IN_PYTHON_ENTRIES = 256


def select_entries(
    scanned: np.ndarray,
    tag_codes: frozenset[int] | None,
    *,
    max_messages: int,
    max_bytes: int,
    message_overhead: int,
) -> tuple[np.ndarray, int]:
    """The entries of `scanned` a pull takes, and how many of `scanned` it got past.

    Up to `max_messages` entries whose tag code is in `tag_codes` (None: any), cut where their body
    sizes plus `message_overhead` each pass `max_bytes` (at least one is taken). When a limit cuts
    the scan short, the pull got past the last entry taken; otherwise past everything scanned.
    The entries may be views of `scanned`.
    """
    if tag_codes is not None:
        candidates = np.flatnonzero(np.isin(scanned["tags_code"], np.fromiter(tag_codes, np.int64)))
        found = len(candidates)
        matched: np.ndarray | slice = candidates[:max_messages]
    else:  # every entry scanned is a candidate
        found = len(scanned)
        matched = slice(0, min(found, max_messages))
    taken = scanned[matched]
    if len(taken):
        sizes = taken["size"].astype(np.int64) + message_overhead
        taken = taken[: max(1, int(np.searchsorted(np.cumsum(sizes), max_bytes, side="right")))]
    if len(taken) < found:
        last = len(taken) - 1 if isinstance(matched, slice) else int(matched[len(taken) - 1])
        return taken, last + 1
    return taken, len(scanned)


def live_entries(entries: np.ndarray, first_position: int) -> np.ndarray:
    """`entries` less those whose stored batch lies before `first_position` (its segment is gone):
    those are a prefix."""
    return entries[int(np.searchsorted(entries["batch_pos"], first_position)) :]


def by_stored_batch(entries: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(stored batch position, rows in that batch) of each run of `entries` (not empty) that
    points into one stored batch, in order; the rows are views of `entries`."""
    positions, rows = entries["batch_pos"], entries["row"]
    if positions[0] == positions[-1]:
        starts = [0]
    elif len(entries) <= _SPLIT_IN_PYTHON_ENTRIES:
        listed = positions.tolist()
        starts = [0, *(i for i in range(1, len(listed)) if listed[i] != listed[i - 1])]
    else:
        starts = [0, *(np.flatnonzero(np.diff(positions)) + 1).tolist()]
    return [(int(positions[lo]), rows[lo:hi]) for lo, hi in itertools.pairwise([*starts, len(entries)])]
