"""A send as one attempt at a round stores it: the rows its duplicate check kept, where they go, its answer.

The commit log writer makes a :class:`RoundSend` of each request every time it tries to write a
round, so nothing one attempt decided (rows dropped as duplicates, offsets) outlives it: a round that
fails is split, and each half is checked and placed afresh from the unchanged requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from broker.store.append_requests import AppendRequest, StandardMessage
from broker.store.dedup import StoredAt
from broker.store.results import PutResult, PutStatus
from broker.store.round_duplicates import SendDuplicates


@dataclass(eq=False, slots=True)
class RoundSend:
    request: AppendRequest
    duplicates: SendDuplicates
    # the rows stored: the request's, less its duplicates
    messages: list[StandardMessage] | None
    arrow: pa.RecordBatch | None
    arrow_properties: pa.StringArray | None
    arrow_flags: np.ndarray | None  # of an Arrow batch taken from a standard batch send
    # set when the round is placed
    first_queue_offset: int = 0
    first_commit_log_offset: int = 0
    count: int = field(init=False)  # rows stored: the request's, less its duplicates

    def __post_init__(self) -> None:
        self.count = self.request.count - self.duplicates.count

    @classmethod
    def of(cls, request: AppendRequest, duplicates: SendDuplicates) -> RoundSend:
        kept = duplicates.kept
        if kept is None:
            flags = None if request.standard is None else request.standard.flags
            return cls(request, duplicates, request.messages, request.arrow, request.arrow_properties, flags)
        if request.messages is not None:
            return cls(request, duplicates, [request.messages[i] for i in kept.tolist()], None, None, None)
        assert request.arrow is not None
        keep = np.zeros(request.count, dtype=bool)
        keep[kept] = True
        mask = pa.array(keep)
        properties = request.arrow_properties.filter(mask) if request.arrow_properties is not None else None
        flags = None if request.standard is None else request.standard.flags[kept]
        return cls(request, duplicates, None, request.arrow.filter(mask), properties, flags)

    @property
    def topic(self) -> str:
        return self.request.topic

    @property
    def queue_id(self) -> int:
        return self.request.queue_id

    @property
    def first_stored(self) -> StoredAt:
        return StoredAt(self.queue_id, self.first_queue_offset, self.first_commit_log_offset)

    def position(self, row: int) -> StoredAt:
        """Where row `row` of the request went (a row this send stores)."""
        kept = self.duplicates.kept
        index = row if kept is None else int(np.searchsorted(kept, row))
        return StoredAt(self.queue_id, self.first_queue_offset + index, self.first_commit_log_offset + index)

    def result(self, status: PutStatus, round_sends: Sequence[RoundSend]) -> PutResult:
        """The answer to the send, once its round (`round_sends`, in order) is stored."""
        duplicates = self.duplicates
        if not duplicates.count:
            return PutResult(status, self.queue_id, self.first_queue_offset, self.count, self.first_commit_log_offset)
        in_window, in_round = duplicates.in_window, duplicates.in_round
        row_offsets = None
        if self.messages is not None or self.request.standard is not None:  # a standard send: the offset of every row
            offsets = np.empty(self.request.count, dtype=np.int64)
            assert duplicates.kept is not None
            offsets[duplicates.kept] = np.arange(self.count) + self.first_commit_log_offset
            offsets[in_window.rows] = in_window.commit_log_offsets
            for row, (send, first_row) in in_round.items():
                offsets[row] = round_sends[send].position(first_row).commit_log_offset
            row_offsets = tuple(offsets.tolist())
        if self.count:
            first = self.first_stored
        elif 0 in in_round:
            send, first_row = in_round[0]
            first = round_sends[send].position(first_row)
        else:
            first = in_window.at(0)  # row 0, the first of the rows in the window
        return PutResult(
            status,
            first.queue_id,
            first.queue_offset,
            self.count,
            first.commit_log_offset,
            duplicates.count,
            row_offsets,
        )
