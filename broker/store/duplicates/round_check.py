"""The duplicate check of a commit round: its sends checked against the window at once.

This module holds the steps of a commit round's duplicate check; :mod:`broker.store.duplicates.window`
holds the window itself, and :mod:`broker.store.duplicates.checker` the one entry point the writer
calls. Each attempt to write a commit round checks its sends afresh (a round that fails to build is
split and each half is checked again), and what it decides lives in one immutable
:class:`SendDuplicates` per send, never in the sends: a half is never answered with a first copy
that was in a send of the other half, which may have been refused. What the check reads of a send
is :class:`CheckedSend` (the writer's append requests are such sends).

The check has two steps:

1. :func:`find_repeats` hashes the keys of the whole round, looks them up in the window and among
   the round's earlier rows, and compares bodies within the round. It touches only the sends
   (which nothing changes) and the window (which only the writer uses, one round at a time), so the
   writer runs it in its I/O thread for large rounds.
2. :func:`settle` compares the bodies of window hits with their first copies, read through
   :func:`read_bodies` on the event loop (which owns the commit log's segment lists and cache), and
   decides which rows are dropped.

:func:`remember_round` adds the new keys once the round is written.

A row is only dropped when its body is also the body of the first copy: a resend carries the same
message, while some clients give two different messages one UNIQ_KEY (the C++ client
`rocketmq==0.4.4` does when sending from several threads, or from processes started in the same
second). Such a row is stored, and its key stays with the first copy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker.store.duplicates.window import DuplicateWindow, StoredAt, deduplicated_topic, key_hash, key_hashes
from broker.store.log.commitlog import CommitLog
from broker.store.log.stored import Piece, StoredBatch, arrow_batches

#: rounds of at most this many keys are checked one key at a time (numpy's fixed cost per call
#: exceeds the per-key Python for them: a single send's check took 0.3 ms, now about 0.03 ms;
#: a round of 24 single sends, window and all, 156 µs one key at a time against 179 µs with numpy)
SMALL_ROUND = 24

#: a row of the round attempt being checked: (its send's index in the round, its row in that send)
InRound = tuple[int, int]

#: the bodies of stored messages by commit log offset (binary, null where gone), on the event loop
StoredBodies = Callable[[np.ndarray], Awaitable[pa.Array]]


class CheckedMessage(Protocol):
    """What the check reads of one message of a standard send."""

    @property
    def body(self) -> bytes: ...

    @property
    def uniq_key(self) -> str | None: ...


class CheckedSend(Protocol):
    """What the check reads of a send: its topic and rows (standard messages, or a producer's Arrow
    batch with `uniq_key` and `body` columns), and the key hashes of an Arrow batch when they were
    computed as it was queued."""

    @property
    def topic(self) -> str: ...

    @property
    def count(self) -> int: ...

    @property
    def messages(self) -> Sequence[CheckedMessage] | None: ...

    @property
    def arrow(self) -> pa.RecordBatch | None: ...

    @property
    def key_hashes(self) -> tuple[np.ndarray, np.ndarray] | None: ...


_NO_ROWS = np.empty(0, dtype=np.int64)
_NO_ROWS.flags.writeable = False


def _no_rows() -> np.ndarray:
    """An empty array, shared: most sends of most rounds have no duplicate (and an empty array
    cannot be changed)."""
    return _NO_ROWS


@dataclass(frozen=True, slots=True)
class WindowCopies:
    """Rows whose key (and body) the window holds, and where each one's first copy is."""

    rows: np.ndarray = field(default_factory=_no_rows)  # ascending within a send
    queue_ids: np.ndarray = field(default_factory=_no_rows)
    queue_offsets: np.ndarray = field(default_factory=_no_rows)
    commit_log_offsets: np.ndarray = field(default_factory=_no_rows)

    def take(self, which: np.ndarray | slice) -> WindowCopies:
        return WindowCopies(
            self.rows[which], self.queue_ids[which], self.queue_offsets[which], self.commit_log_offsets[which]
        )

    def at(self, i: int) -> StoredAt:
        return StoredAt(int(self.queue_ids[i]), int(self.queue_offsets[i]), int(self.commit_log_offsets[i]))


@dataclass(frozen=True, slots=True)
class SendDuplicates:
    """What the check of one commit round attempt decided for one of its sends: the rows it does not store
    (a first copy is in the window, or earlier in the round) and the new keys of those it does."""

    in_window: WindowCopies = field(default_factory=WindowCopies)
    in_round: Mapping[int, InRound] = field(default_factory=dict)
    kept: np.ndarray | None = None  # the rows stored, ascending (None: all)
    new_hashes: np.ndarray | None = None  # key hashes of the stored rows whose key is new to the window
    new_rows: np.ndarray | None = None  # their rows among the stored rows

    @property
    def count(self) -> int:
        """Rows not stored."""
        return len(self.in_window.rows) + len(self.in_round)


NO_DUPLICATES = SendDuplicates()
_NO_COPIES = WindowCopies()


@dataclass(slots=True)
class Repeats:
    """Step one of a commit round's check: its rows whose key was seen before, by send index."""

    # send -> row -> an earlier row of the round with the same key and body
    in_round: dict[int, dict[int, InRound]] = field(default_factory=dict)
    # rows whose key the window holds (bodies not compared yet), ordered by send, and their sends
    hits: WindowCopies = field(default_factory=WindowCopies)
    hit_sends: np.ndarray = field(default_factory=_no_rows)
    # send -> (its rows whose key is new to the window, their key hashes)
    new: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def find_repeats(window: DuplicateWindow, requests: Sequence[CheckedSend], now_ms: int) -> Repeats:
    """Step one of the check of a commit round (any thread, see the module's docstring).

    The whole round is hashed and looked up at once; Python runs per send only to hand out the
    results, and per row only for the rows whose key repeats within the round.
    """
    repeats = Repeats()
    checked = [i for i, r in enumerate(requests) if deduplicated_topic(r.topic)]
    if not checked or not window.enabled:
        return repeats
    sends = [requests[i] for i in checked]
    if all(s.messages is not None for s in sends) and sum(s.count for s in sends) <= SMALL_ROUND:
        _find_repeats_one_by_one(window, requests, checked, now_ms, repeats)
        return repeats
    counts = np.fromiter((r.count for r in sends), dtype=np.int64, count=len(sends))
    hashes, present = _round_key_hashes(sends)
    if not present.any():
        return repeats
    starts = np.cumsum(counts) - counts
    keyed = np.flatnonzero(present)  # rows of the round that carry a key
    send_of = np.searchsorted(starts, keyed, side="right") - 1
    rows = keyed - starts[send_of]  # each keyed row's row within its send
    hashes = hashes[keyed]
    found = window.lookup(hashes, now_ms)
    hit = np.flatnonzero(found.hit)
    if len(hit):
        repeats.hits = WindowCopies(
            rows[hit], found.queue_ids[hit], found.queue_offsets[hit], found.commit_log_offsets[hit]
        )
        repeats.hit_sends = np.asarray(checked, dtype=np.int64)[send_of[hit]]
    seen = found.hit.copy()
    first_row = _first_rows(hashes)
    if first_row is not None:  # later rows of keys new in this round
        seen |= first_row != np.arange(len(hashes))
        for j in np.flatnonzero(seen & ~found.hit).tolist():
            k = int(first_row[j])
            send, row, first = checked[send_of[j]], int(rows[j]), (checked[send_of[k]], int(rows[k]))
            if _body(requests[first[0]], first[1]) == _body(requests[send], row):
                repeats.in_round.setdefault(send, {})[row] = first
    new = ~seen
    new_send, new_rows, new_hashes = send_of[new], rows[new], hashes[new]
    bounds = np.searchsorted(new_send, np.arange(len(sends) + 1))
    for i, send in enumerate(checked):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        if lo < hi:
            repeats.new[send] = (new_rows[lo:hi], new_hashes[lo:hi])
    return repeats


def _find_repeats_one_by_one(
    window: DuplicateWindow, requests: Sequence[CheckedSend], checked: list[int], now_ms: int, repeats: Repeats
) -> None:
    """:func:`find_repeats` for a few standard messages, one key at a time in Python."""
    seen: dict[int, InRound] = {}
    hits: list[tuple[int, int, StoredAt]] = []
    for send in checked:
        topic = requests[send].topic
        new_rows: list[int] = []
        new_hashes: list[int] = []
        for row, message in enumerate(requests[send].messages or ()):
            if not message.uniq_key:
                continue
            hashed = key_hash(topic, message.uniq_key)
            earlier = seen.get(hashed)
            if earlier is not None:
                if _body(requests[earlier[0]], earlier[1]) == message.body:
                    repeats.in_round.setdefault(send, {})[row] = earlier
                continue
            stored = window.lookup_one(hashed, now_ms)
            if stored is not None:
                hits.append((send, row, stored))
                continue
            seen[hashed] = (send, row)
            new_rows.append(row)
            new_hashes.append(hashed)
        if new_rows:
            repeats.new[send] = (np.array(new_rows, dtype=np.int64), np.array(new_hashes, dtype=np.uint64))
    if hits:
        repeats.hit_sends = np.array([send for send, _, _ in hits], dtype=np.int64)
        repeats.hits = WindowCopies(
            np.array([row for _, row, _ in hits], dtype=np.int64),
            np.array([at.queue_id for _, _, at in hits], dtype=np.int32),
            np.array([at.queue_offset for _, _, at in hits], dtype=np.int64),
            np.array([at.commit_log_offset for _, _, at in hits], dtype=np.int64),
        )


async def settle(
    requests: Sequence[CheckedSend], repeats: Repeats, stored_bodies: StoredBodies
) -> list[SendDuplicates]:
    """Step two (event loop): compare window hits with their first copies' bodies, all at once;
    what each send of the round stores, in the order of `requests`."""
    hits, hit_sends = repeats.hits, repeats.hit_sends
    if len(hits.rows):
        stored = await stored_bodies(hits.commit_log_offsets)
        same = pc.fill_null(pc.equal(stored, _sent_bodies(requests, hit_sends, hits.rows)), False)
        duplicate = np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
        hits, hit_sends = hits.take(duplicate), hit_sends[duplicate]
    # no window hit (the common case): no numpy call for a round of a few single sends
    bounds = np.searchsorted(hit_sends, np.arange(len(requests) + 1)).tolist() if len(hit_sends) else None
    decided: list[SendDuplicates] = []
    for send, request in enumerate(requests):
        lo, hi = (0, 0) if bounds is None else (bounds[send], bounds[send + 1])
        in_round = repeats.in_round.get(send, {})
        new_rows, new_hashes = repeats.new.get(send, (None, None))
        if lo == hi and not in_round and new_rows is None:
            decided.append(NO_DUPLICATES)
            continue
        in_window = hits.take(slice(lo, hi)) if lo < hi else _NO_COPIES
        kept = None
        if lo < hi or in_round:
            keep = np.ones(request.count, dtype=bool)
            keep[in_window.rows] = False
            keep[list(in_round)] = False
            kept = np.flatnonzero(keep)
            if new_rows is not None:
                new_rows = np.searchsorted(kept, new_rows)
        decided.append(SendDuplicates(in_window, in_round, kept, new_hashes, new_rows))
    return decided


def _sent_bodies(requests: Sequence[CheckedSend], sends: np.ndarray, rows: np.ndarray) -> pa.Array:
    """The bodies of rows `rows` of sends `sends` (ordered by send), as they came."""
    pieces: list[pa.Array] = []
    bounds = np.flatnonzero(np.diff(sends)) + 1
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(sends)], strict=True):
        request, wanted = requests[int(sends[lo])], rows[lo:hi]
        if request.messages is not None:
            messages = request.messages
            pieces.append(pa.array([messages[row].body for row in wanted.tolist()], pa.binary()))
        else:
            assert request.arrow is not None
            pieces.append(request.arrow.column("body").take(pa.array(wanted)).cast(pa.binary()))
    return pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)


async def read_bodies(
    commit_log: CommitLog, batch_at: Callable[[int], Awaitable[StoredBatch]], offsets: np.ndarray
) -> pa.Array:
    """The bodies of the stored messages at `offsets`, null where there is none (event loop).

    `batch_at` gives the stored batch at a position, from the cache or read on a reader thread.
    """
    positions, rows = await commit_log.locate_many(offsets)
    located = np.flatnonzero(positions >= 0)
    batch_positions, batch_of = np.unique(positions[located], return_inverse=True)
    batches = await asyncio.gather(*(_batch_or_none(batch_at, int(p)) for p in batch_positions.tolist()))
    order = np.argsort(batch_of, kind="stable")
    groups = np.split(located[order], np.flatnonzero(np.diff(batch_of[order])) + 1) if len(order) else []
    pieces: list[pa.Array] = []
    filled: list[np.ndarray] = []
    for stored, group in zip(batches, groups, strict=True):
        if stored is None:
            continue
        ascending, back = np.unique(rows[group], return_inverse=True)
        bodies = arrow_batches([Piece(stored, ascending)])[0].column("body")
        pieces.append(bodies.take(pa.array(back)).cast(pa.binary()))
        filled.append(group)
    if not pieces:
        return pa.nulls(len(offsets), pa.binary())
    found = pa.concat_arrays([*pieces, pa.nulls(1, pa.binary())])
    take = np.full(len(offsets), len(found) - 1, dtype=np.int64)  # the null at the end
    take[np.concatenate(filled)] = np.arange(len(found) - 1)
    return found.take(pa.array(take))


async def _batch_or_none(batch_at: Callable[[int], Awaitable[StoredBatch]], position: int) -> StoredBatch | None:
    try:
        return await batch_at(position)
    except LookupError:  # its segment expired meanwhile: the first copy is gone
        return None


def remember_round(
    window: DuplicateWindow, store_timestamp: int, sends: Sequence[tuple[SendDuplicates, StoredAt]]
) -> None:
    """Add the keys a written commit round stored to the duplicate window; `sends`: each send's check and
    where its first stored row went."""
    keyed = [(d, at) for d, at in sends if d.new_hashes is not None and len(d.new_hashes)]
    if not keyed:
        return
    counts = [len(d.new_hashes) for d, _ in keyed]  # type: ignore[arg-type]
    if sum(counts) <= SMALL_ROUND:
        for duplicates, at in keyed:
            assert duplicates.new_hashes is not None and duplicates.new_rows is not None
            for hashed, row in zip(duplicates.new_hashes.tolist(), duplicates.new_rows.tolist(), strict=True):
                where = (at.queue_id, at.queue_offset + row, at.commit_log_offset + row)
                window.add_one(store_timestamp, hashed, where)
        return
    rows = np.concatenate([d.new_rows for d, _ in keyed])

    def per_row(values: list[int]) -> np.ndarray:
        return np.repeat(np.array(values, dtype=np.int64), counts)

    window.add(
        store_timestamp,
        np.concatenate([d.new_hashes for d, _ in keyed]),
        per_row([at.queue_id for _, at in keyed]),
        per_row([at.queue_offset for _, at in keyed]) + rows,
        per_row([at.commit_log_offset for _, at in keyed]) + rows,
    )


def _first_rows(hashes: np.ndarray) -> np.ndarray | None:
    """For each hash, the first row with that hash; None when no hash repeats (the usual case,
    which a sort tells five times faster than np.unique)."""
    ordered = np.sort(hashes)
    if not (ordered[1:] == ordered[:-1]).any():
        return None
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    result: np.ndarray = first[inverse]
    return result


def _round_key_hashes(sends: list[CheckedSend]) -> tuple[np.ndarray, np.ndarray]:
    """The key hashes of every row of `sends`, in order, and which rows have a key: Arrow sends
    bring theirs (hashed when submitted), standard sends are hashed here all at once."""
    standard = [s for s in sends if s.messages is not None]
    if standard:
        keys = pa.array([m.uniq_key for s in standard for m in s.messages or ()], pa.string())
        standard_hashes, standard_present = key_hashes([s.topic for s in standard], [s.count for s in standard], keys)
    hashes: list[np.ndarray] = []
    present: list[np.ndarray] = []
    at = 0
    for send in sends:
        if send.messages is not None:
            hashes.append(standard_hashes[at : at + send.count])
            present.append(standard_present[at : at + send.count])
            at += send.count
        else:
            send_hashes, send_present = send.key_hashes or arrow_key_hashes(send)
            hashes.append(send_hashes)
            present.append(send_present)
    if len(hashes) == 1:
        return hashes[0], present[0]
    return np.concatenate(hashes), np.concatenate(present)


def arrow_key_hashes(send: CheckedSend) -> tuple[np.ndarray, np.ndarray]:
    assert send.arrow is not None
    return key_hashes([send.topic], [send.count], send.arrow.column("uniq_key").cast(pa.string()))


def _body(send: CheckedSend, row: int) -> bytes:
    """The body of row `row` of a send, as it came."""
    if send.messages is not None:
        return send.messages[row].body
    assert send.arrow is not None
    body: bytes = send.arrow.column("body")[row].as_py()
    return body
