"""Rows of many stored commit rounds read together: their segment mapped once, record starts found at once.

A queue filled by single sends holds a few messages of each stored commit round (a round stores the sends
of every queue that arrived together), so a large pull far behind the tail touches a round every
few messages: 10,000 messages of one of eight queues touch about 3,000 rounds. Read one at a time,
each round cost two preads, a parse of its record bounds and the objects around them (about 35 µs,
11.5 µs a message). Here the part of a segment holding the rounds is mapped (not copied), the
rounds' headers are read with numpy, the start of every record taken is found by following the
TOTALSIZE fields of all rounds side by side (one numpy step per record of the longest prefix of a
round the pull needs, not one Python step per record), and the records taken are copied together,
so decoding them walks a few MB instead of the mapped span.

Rounds found this way are not put in the batch cache: such a read would only evict the tail that
live consumers read; a pull whose rounds are mostly cached takes them from the cache instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from broker.store.log import record
from broker.store.log.commitlog import Segment
from broker.store.log.stored import Piece, WireRecords, runs
from rocketspark.errors import StoreCorruptionError
from rocketspark.message.batches.arrays import binary_from_ranges, offsets_and_buffer
from rocketspark.message.records.decoding import read_big_endian, record_bounds_array
from rocketspark.message.records.layout import BE_I32, MIN_RECORD

#: a pull that needs this many stored rounds not in the batch cache reads them here (fewer: one at a
#: time, into the cache)
SCATTERED_ROUNDS = 16
#: rounds whose records are followed side by side up to this row; deeper rows: the round is parsed
_FOLLOWED_ROWS = 64
#: the most of a segment one step of a scattered read maps (plus its last round). Mapped pages count
#: in the broker's resident size while mapped: a pull of 100,000 single-sent messages of one of 8
#: queues spans about 160 MB of the log, and a full read of 1M such messages, 8 queues at once,
#: peaked at 548 MiB resident (222 MiB of it file pages) with the whole span mapped at once
MAPPED_SPAN_BYTES = 16 * 1024 * 1024


def many_rounds_to_read(positions: np.ndarray, cached: Callable[[int], bool]) -> bool:
    """Whether entries with these stored-batch positions (ascending) name SCATTERED_ROUNDS rounds
    or more that `cached` (the batch cache) does not hold: rounds held there are taken from it."""
    if len(positions) < SCATTERED_ROUNDS:
        return False
    rounds = positions[np.flatnonzero(np.diff(positions, prepend=-1))]
    return len(rounds) >= SCATTERED_ROUNDS and sum(not cached(p) for p in rounds.tolist()) >= SCATTERED_ROUNDS


def read_scattered(reads: list[tuple[Segment, np.ndarray]]) -> list[Piece]:
    """The rows named by the entries of each (segment, consume-queue entries in it), ascending, in
    their order (blocking: a reader thread, handed the segments by the event loop). Records of
    consecutive wire rounds come back as one piece, which decodes in one call."""
    pieces: list[Piece] = []
    for segment, entries in reads:
        positions = entries["batch_pos"]
        firsts = np.flatnonzero(np.diff(positions, prepend=-1))  # each round's first entry
        rounds = positions[firsts]
        # a step at a time, each mapping at most about MAPPED_SPAN_BYTES
        steps = np.flatnonzero(np.diff((rounds - rounds[0]) // MAPPED_SPAN_BYTES)) + 1
        for low, high in zip([0, *steps.tolist()], [*steps.tolist(), len(rounds)], strict=True):
            first = int(firsts[low])
            end = int(firsts[high]) if high < len(firsts) else len(entries)
            pieces += _read_segment(segment, rounds[low:high], firsts[low:high] - first, entries[first:end])
    merged: list[Piece] = []
    for run in runs(pieces):
        merged += [_joined(run)] if isinstance(run[0].stored, WireRecords) else run
    return merged


def _joined(pieces: list[Piece]) -> Piece:
    """Pieces taking every record of their WireRecords, as one."""
    if len(pieces) == 1:
        return pieces[0]
    wire = [piece.stored for piece in pieces if isinstance(piece.stored, WireRecords)]
    sizes = np.array([len(w.payload) for w in wire], dtype=np.int64)
    shifts = np.cumsum(sizes) - sizes
    bounds = np.concatenate(
        [*(w.bounds[:-1] + shift for w, shift in zip(wire, shifts.tolist(), strict=True)), [sizes.sum()]]
    )
    return Piece(WireRecords(b"".join(w.payload for w in wire), bounds), np.arange(len(bounds) - 1))


def _be_i32(raw: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The big-endian int32 at each position of `raw` (header fields and TOTALSIZE)."""
    return read_big_endian(raw, at, BE_I32)


def _read_segment(segment: Segment, rounds: np.ndarray, firsts: np.ndarray, entries: np.ndarray) -> list[Piece]:
    """The rows of `entries` in `rounds` (their positions in `segment`); `firsts`: each round's
    first entry."""
    start = int(rounds[0])
    last = record.parse_header(os.pread(segment.fd, record.HEADER_SIZE, int(rounds[-1]) - segment.start))
    if last is None:
        raise StoreCorruptionError(f"no stored batch starts at commit log offset {int(rounds[-1])}")
    data = segment.mapped(start, int(rounds[-1]) - start + last.total_length)
    raw = np.frombuffer(data, dtype=np.uint8)
    at = rounds - start
    headers = record.parse_headers(raw, at)
    if not headers.valid.all():
        first = int(rounds[np.flatnonzero(~headers.valid)[0]])
        raise StoreCorruptionError(f"no stored batch starts at commit log offset {first}")
    payload_at = at + record.HEADER_SIZE
    payload_end = payload_at + headers.payload_length
    counts = np.diff(np.append(firsts, len(entries)))
    round_of = np.repeat(np.arange(len(rounds)), counts)
    rows = entries["row"].astype(np.int64)
    wire = headers.wire
    starts = np.zeros(len(entries), dtype=np.int64)
    if wire.any():
        wanted = np.flatnonzero(wire[round_of])
        starts[wanted] = _record_starts(raw, payload_at, payload_end, round_of[wanted], rows[wanted], data)
    return _items(data, wire, round_of, rows, starts, payload_at, payload_end)


def _record_starts(
    raw: np.ndarray,
    payload_at: np.ndarray,
    payload_end: np.ndarray,
    round_of: np.ndarray,
    rows: np.ndarray,
    data: memoryview,
) -> np.ndarray:
    """Where record `rows[i]` of round `round_of[i]` starts in `raw`: TOTALSIZE followed from each
    round's first record, all rounds side by side (rounds needing deep rows: parsed on their own)."""
    deepest = np.zeros(len(payload_at), dtype=np.int64)
    np.maximum.at(deepest, round_of, rows)
    starts = np.empty(len(rows), dtype=np.int64)
    shallow = deepest <= _FOLLOWED_ROWS
    for index in np.flatnonzero(~shallow).tolist():
        bounds = record_bounds_array(data[int(payload_at[index]) : int(payload_end[index])])
        taken = round_of == index
        starts[taken] = payload_at[index] + bounds[rows[taken]]
    followed = np.flatnonzero(shallow)
    slot = np.full(len(payload_at), -1, dtype=np.int64)
    slot[followed] = np.arange(len(followed))
    table = np.empty((len(followed), int(deepest[followed].max(initial=0)) + 1), dtype=np.int64)
    current = payload_at[followed].copy()
    ends, needed = payload_end[followed], deepest[followed]
    for step in range(table.shape[1]):
        table[:, step] = current
        going = np.flatnonzero(needed > step)
        if not len(going):
            break
        if (current[going] + MIN_RECORD > ends[going]).any():
            raise StoreCorruptionError("a stored round holds fewer records than its consume queue entries name")
        totals = _be_i32(raw, current[going])
        if (totals < MIN_RECORD).any():
            raise StoreCorruptionError("a stored round holds a record whose TOTALSIZE is too small")
        current[going] += totals
    on_table = slot[round_of] >= 0
    starts[on_table] = table[slot[round_of[on_table]], rows[on_table]]
    if (starts + MIN_RECORD > payload_end[round_of]).any():
        raise StoreCorruptionError("a stored round holds fewer records than its consume queue entries name")
    return starts


def _items(
    data: memoryview,
    wire: np.ndarray,
    round_of: np.ndarray,
    rows: np.ndarray,
    starts: np.ndarray,
    payload_at: np.ndarray,
    payload_end: np.ndarray,
) -> list[Piece]:
    """Runs of entries in wire rounds as one Piece each, of their records copied together (so
    decoding them walks 2 MB, not the span read, and a standard pull takes them as they are);
    rows of Arrow rounds as Pieces of their batch."""
    entry_wire = wire[round_of]
    cuts = np.flatnonzero(np.diff(entry_wire.astype(np.int8)) | (~entry_wire[1:] & (np.diff(round_of) != 0))) + 1
    pieces: list[Piece] = []
    buffer = pa.py_buffer(data)
    raw = np.frombuffer(data, dtype=np.uint8)
    for low, high in zip([0, *cuts.tolist()], [*cuts.tolist(), len(rows)], strict=True):
        if entry_wire[low]:
            taken = starts[low:high]
            ends = taken + _be_i32(raw, taken)
            if (ends > payload_end[round_of[low:high]]).any():
                raise StoreCorruptionError("a stored record overruns its round")
            bounds, records = offsets_and_buffer(binary_from_ranges(buffer, taken, ends, pa.binary()))
            pieces.append(Piece(WireRecords(records.to_pybytes(), bounds), np.arange(high - low)))
        else:
            index = int(round_of[low])
            at, end = int(payload_at[index]), int(payload_end[index])
            pieces.append(Piece(record.arrow_payload(buffer.slice(at, end - at)), rows[low:high]))
    return pieces
