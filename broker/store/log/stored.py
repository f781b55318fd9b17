"""What one commit log record holds, and what reads make of it.

A record holds either an Arrow record batch of STORED_SCHEMA (what Arrow sends and mixed commit
rounds store) or RocketMQ's own message records (:class:`WireRecords`: what a commit round of standard
sends stores, laid out exactly as a standard pull returns them). Each read converts only where the
reader's form differs from the stored one, and converts many stored records at once:

- a standard pull of wire records is a byte copy; of Arrow rows, one `encode_records` call over
  all the Arrow rows it takes;
- an Arrow pull of Arrow rows is a slice; of wire records, one `decode_records_to_batch` call
  over all the wire records it takes, told where they start;
- recovery and the index read Arrow batches, decoding runs of wire records together
  (:func:`as_batches`); a lookup of one message (by offset, id or key) reads it as a row
  (:func:`stored_row`), and a 5.x receive its few messages (:func:`piece_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa

from rocketspark.message.records.decoding import decode_records_to_batch, record_bounds_array
from rocketspark.message.records.encoding import encode_records
from rocketspark.message.records.scalar import stored_rows


@dataclass(frozen=True, slots=True)
class WireRecords:
    """Message records as a standard pull returns them, with where each one starts."""

    payload: bytes
    bounds: np.ndarray  # int64: the start of each record, then the end of the last

    @classmethod
    def parse(cls, payload: bytes) -> WireRecords:
        return cls(payload, record_bounds_array(payload))

    @property
    def num_rows(self) -> int:
        return len(self.bounds) - 1

    @property
    def nbytes(self) -> int:
        return len(self.payload) + self.bounds.nbytes

    def records(self, rows: np.ndarray) -> bytes:
        """The records at `rows` (ascending), as one byte string."""
        first, last = int(rows[0]), int(rows[-1])
        if last - first + 1 == len(rows):
            return self.payload[int(self.bounds[first]) : int(self.bounds[last + 1])]
        view = memoryview(self.payload)
        return b"".join(view[int(self.bounds[r]) : int(self.bounds[r + 1])] for r in rows.tolist())


StoredBatch: TypeAlias = pa.RecordBatch | WireRecords


def stored_size(stored: StoredBatch) -> int:
    """Bytes a stored batch takes in memory (for the commit log's cache)."""
    if isinstance(stored, WireRecords):
        return stored.nbytes
    return int(stored.get_total_buffer_size())


@dataclass(frozen=True, slots=True)
class Piece:
    """Rows (ascending) of one stored batch, as a pull takes them."""

    stored: StoredBatch
    rows: np.ndarray

    def arrow(self) -> pa.RecordBatch:
        assert isinstance(self.stored, pa.RecordBatch)
        first, count = int(self.rows[0]), len(self.rows)
        if int(self.rows[-1]) - first + 1 == count:
            return self.stored.slice(first, count)
        return self.stored.take(pa.array(self.rows))


def runs(pieces: Sequence[Piece]) -> list[list[Piece]]:
    """The pieces cut into runs of consecutive pieces of one kind (wire records or Arrow)."""
    runs: list[list[Piece]] = []
    for piece in pieces:
        wire = isinstance(piece.stored, WireRecords)
        if runs and isinstance(runs[-1][0].stored, WireRecords) == wire:
            runs[-1].append(piece)
        else:
            runs.append([piece])
    return runs


def _wire_bytes(run: Sequence[Piece]) -> bytes:
    parts = []
    for piece in run:
        assert isinstance(piece.stored, WireRecords)
        parts.append(piece.stored.records(piece.rows))
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _decode_wire(run: Sequence[Piece]) -> pa.RecordBatch:
    """The run's rows of wire records as one STORED_SCHEMA batch.

    Where each row lies comes from the stored bounds, with numpy over the whole run; the rows are
    copied together with one join and the decoder is told where each starts, so nothing walks
    their TOTALSIZE fields again. One piece is decoded where it is stored, with no copy."""
    if len(run) == 1:
        piece = run[0]
        assert isinstance(piece.stored, WireRecords)
        return decode_records_to_batch(piece.stored.payload, decompress=False, starts=piece.stored.bounds[piece.rows])
    wire = [piece.stored for piece in run if isinstance(piece.stored, WireRecords)]
    assert len(wire) == len(run)
    bounds_sizes = np.fromiter((len(w.bounds) for w in wire), np.int64, len(wire))
    taken = np.fromiter((len(piece.rows) for piece in run), np.int64, len(run))
    piece_of = np.repeat(np.arange(len(run)), taken)
    at = (np.cumsum(bounds_sizes) - bounds_sizes)[piece_of] + np.concatenate([piece.rows for piece in run])
    bounds = np.concatenate([w.bounds for w in wire])
    firsts, ends = bounds[at], bounds[at + 1]
    views = [memoryview(w.payload) for w in wire]
    payload = b"".join(
        [views[p][s:e] for p, s, e in zip(piece_of.tolist(), firsts.tolist(), ends.tolist(), strict=True)]
    )
    sizes = ends - firsts
    return decode_records_to_batch(payload, decompress=False, starts=np.cumsum(sizes) - sizes)


def _arrow_batch(run: Sequence[Piece]) -> pa.RecordBatch:
    batches = [piece.arrow() for piece in run]
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def standard_records(pieces: Sequence[Piece], store_host: str) -> bytes:
    """The pieces' messages as a standard pull's body."""
    parts = []
    for run in runs(pieces):
        if isinstance(run[0].stored, WireRecords):
            parts.append(_wire_bytes(run))
        else:
            parts.append(encode_records(_arrow_batch(run), store_host))
    return parts[0] if len(parts) == 1 else b"".join(parts)


def arrow_batches(pieces: Sequence[Piece]) -> list[pa.RecordBatch]:
    """The pieces' messages as STORED_SCHEMA batches, wire records decoded a run at a time."""
    batches = []
    for run in runs(pieces):
        if isinstance(run[0].stored, WireRecords):
            batches.append(_decode_wire(run))
        else:
            batches.extend(piece.arrow() for piece in run)
    return batches


def piece_rows(pieces: Sequence[Piece]) -> list[dict[str, Any]]:
    """The pieces' messages as STORED_SCHEMA rows, what `to_pylist()` of their :func:`arrow_batches`
    gives: wire records decoded one at a time, with no batch built around them and taken apart
    again (a 5.x receive's few rows: about 7 µs a row less)."""
    rows: list[dict[str, Any]] = []
    for piece in pieces:
        if isinstance(piece.stored, WireRecords):
            starts = piece.stored.bounds[piece.rows].tolist()
            rows.extend(stored_rows(piece.stored.payload, starts, decompress=False))
        else:
            rows.extend(piece.arrow().to_pylist())
    return rows


def stored_row(stored: StoredBatch, row: int) -> dict[str, Any]:
    """One message of a stored batch as a STORED_SCHEMA row, for a lookup of one message: a wire
    record is decoded on its own (10-16 µs here), with no batch built around it."""
    if isinstance(stored, WireRecords):
        return stored_rows(stored.payload, [int(stored.bounds[row])], decompress=False)[0]
    rows: list[dict[str, Any]] = stored.slice(row, 1).to_pylist()
    return rows[0]


def whole(stored: StoredBatch) -> Piece:
    return Piece(stored, np.arange(stored.num_rows))


def as_batches(stored: Sequence[StoredBatch]) -> list[pa.RecordBatch]:
    """One STORED_SCHEMA batch per stored batch, with runs of wire records decoded together."""
    result: list[pa.RecordBatch] = []
    for run in runs([whole(s) for s in stored]):
        if isinstance(run[0].stored, WireRecords):
            decoded = _decode_wire(run)
            at = 0
            for piece in run:
                result.append(decoded.slice(at, len(piece.rows)))
                at += len(piece.rows)
        else:
            result.extend(piece.stored for piece in run)
    return result
