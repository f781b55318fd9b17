"""A commit round: what one attempt at it stores, send by send, and who receives it once written.

A commit round (group commit) is everything the commit log writer takes from its queue at once,
written as one record, made visible and answered together. The writer makes a
:class:`CommitRound` and a :class:`CommitSend` of each request every time it tries to write a
round, so nothing one attempt decided (rows dropped as duplicates, offsets) outlives it: a round
that fails is split, and each half is checked and placed afresh from the unchanged requests.
:class:`CommitTarget` is all the writer knows of the rest of the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa

from broker.store.duplicates.checker import RoundCheck
from broker.store.duplicates.round_check import SendDuplicates
from broker.store.duplicates.window import StoredAt
from broker.store.log.commitlog import Placement, Segment
from broker.store.log.stored import StoredBatch
from broker.store.results import PutResult, PutStatus
from broker.store.writer.append_requests import AppendRequest, StandardMessage


@dataclass(slots=True)
class CommitRound:
    """One attempt at a commit round: its sends, where its record goes and how it is flushed."""

    placement: Placement | None  # None: the round's sends were all duplicates, nothing is written
    sends: list[CommitSend]
    checked: RoundCheck  # the duplicate check of this attempt, which remembers its new keys once written
    store_timestamp: int
    sync: bool
    wire: bool = False  # standard sends only: stored as message records (broker/store/log/stored.py)
    # under SYNC_FLUSH: every segment with records not fsynced yet (earlier rounds that did not
    # wait for the disk, possibly in an older segment) and the round's own, all fsynced with it,
    # so that the flushed offset at the round's end covers nothing that is not on disk
    to_sync: list[Segment] = field(default_factory=list)


class CommitTarget(Protocol):
    """The rest of the store as the commit log writer sees it (the message store implements it)."""

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next message stored in the queue takes."""
        ...

    def commit_round_written(self, written: CommitRound, stored: StoredBatch, length: int) -> None:
        """Register a written commit round (one that stores rows) in the commit log, count it
        flushed when it was fsynced (`written.sync`) and make it visible to pulls; called before
        its sends are answered."""
        ...


@dataclass(eq=False, slots=True)
class CommitSend:
    """A send of a commit round attempt: the rows it stores, where they go, its answer."""

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
    def of(cls, request: AppendRequest, duplicates: SendDuplicates) -> CommitSend:
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

    def result(self, status: PutStatus, round_sends: Sequence[CommitSend]) -> PutResult:
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
