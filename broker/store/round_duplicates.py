"""Duplicate detection in the commit log writer: a round's sends checked against the window at once.

:func:`deduplicate_round` runs before a round is placed: it drops the rows whose UNIQ_KEY the window
holds (or an earlier row of the round carries) and notes, per send, where each dropped row's first
copy is and which new keys it brings; :func:`remember_round` adds those keys once the round is
written. See :mod:`broker.store.dedup` for the window itself.

A row is only dropped when its body is also the body of the first copy: a resend carries the same
message, while some clients give two different messages one UNIQ_KEY (the C++ client
`rocketmq==0.4.4` does when sending from several threads, or from processes started in the same
second). Such a row is stored, and its key stays with the first copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from broker.store.append_requests import AppendRequest
from broker.store.dedup import DuplicateWindow, StoredAt, deduplicated_topic, key_hash, key_hashes

#: rounds of at most this many keys are checked one key at a time (numpy's fixed cost per call
#: exceeds the per-key Python for them: a single send's check took 0.3 ms, now about 0.03 ms)
SMALL_ROUND = 16

#: the bodies of stored messages by commit log offset (None where gone): `CommitLog.bodies_at`
StoredBodies = Callable[[Sequence[int]], list[bytes | None]]


def deduplicate_round(
    window: DuplicateWindow, requests: list[AppendRequest], now_ms: int, stored_bodies: StoredBodies
) -> None:
    """Drop the rows whose UNIQ_KEY and body were stored within the window, or earlier in this round.

    The whole round is hashed and looked up at once; Python runs per send only to hand out the
    results, and per row only for the rows whose key was seen.
    """
    sends = [r for r in requests if not r.deduplicated and deduplicated_topic(r.topic)]
    if not sends:
        return
    for send in sends:
        send.deduplicated = True
    if all(s.messages is not None for s in sends) and sum(s.count for s in sends) <= SMALL_ROUND:
        _deduplicate_small_round(window, sends, now_ms, stored_bodies)
        return
    counts = np.fromiter((r.count for r in sends), dtype=np.int64, count=len(sends))
    hashes, present = _round_key_hashes(sends)
    if not present.any():
        return
    starts = np.cumsum(counts) - counts
    keyed = np.flatnonzero(present)  # rows of the round that carry a key
    send_of = np.searchsorted(starts, keyed, side="right") - 1
    rows = keyed - starts[send_of]  # each keyed row's row within its send
    hashes = hashes[keyed]
    found = window.lookup(hashes, now_ms)
    first_row = _first_rows(hashes)
    seen = found.hit if first_row is None else found.hit | (first_row != np.arange(len(hashes)))
    candidates = np.flatnonzero(seen).tolist()
    hits = [j for j in candidates if found.hit[j]]
    earlier_bodies = dict(zip(hits, stored_bodies([int(found.commit_log_offsets[j]) for j in hits]), strict=True))
    for j in candidates:
        send = sends[send_of[j]]
        body = _body(send, int(rows[j]))
        if found.hit[j]:
            if earlier_bodies[j] == body:
                send.duplicate_of[int(rows[j])] = found.at(j)
        else:  # a later row of a key new in this round
            assert first_row is not None
            k = first_row[j]
            if _body(sends[send_of[k]], int(rows[k])) == body:
                send.duplicate_of[int(rows[j])] = (sends[send_of[k]], int(rows[k]))
    for send in sends:
        if send.duplicate_of:
            _drop_rows(send)
    new = ~seen
    new_send, new_rows, new_hashes = send_of[new], rows[new], hashes[new]
    bounds = np.searchsorted(new_send, np.arange(len(sends) + 1))
    for i, send in enumerate(sends):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        if lo == hi:
            continue
        send.new_hashes = new_hashes[lo:hi]
        send.new_rows = new_rows[lo:hi] if send.kept is None else np.searchsorted(send.kept, new_rows[lo:hi])


def _deduplicate_small_round(
    window: DuplicateWindow, sends: list[AppendRequest], now_ms: int, stored_bodies: StoredBodies
) -> None:
    """:func:`deduplicate_round` for a few standard messages, one key at a time in Python."""
    seen: dict[int, tuple[AppendRequest, int]] = {}
    seen_bodies: dict[int, bytes] = {}  # kept apart: a send's messages are cut down once checked
    for send in sends:
        new_rows: list[int] = []
        new_hashes: list[int] = []
        for row, message in enumerate(send.messages or ()):
            if not message.uniq_key:
                continue
            hashed = key_hash(send.topic, message.uniq_key)
            first = seen.get(hashed) or window.lookup_one(hashed, now_ms)
            if first is not None:
                if isinstance(first, StoredAt):
                    same = stored_bodies([first.commit_log_offset])[0] == message.body
                else:
                    same = seen_bodies[hashed] == message.body
                if same:
                    send.duplicate_of[row] = first
                continue
            seen[hashed] = (send, row)
            seen_bodies[hashed] = message.body
            new_rows.append(row)
            new_hashes.append(hashed)
        if send.duplicate_of:
            _drop_rows(send)
        if new_rows:
            rows = np.array(new_rows, dtype=np.int64)
            send.new_hashes = np.array(new_hashes, dtype=np.uint64)
            send.new_rows = rows if send.kept is None else np.searchsorted(send.kept, rows)


def remember_round(window: DuplicateWindow, requests: list[AppendRequest], store_timestamp: int) -> None:
    """Add the keys a written round stored to the duplicate window."""
    keyed = [r for r in requests if r.new_hashes is not None and len(r.new_hashes)]
    if not keyed:
        return
    counts = [len(r.new_hashes) for r in keyed]  # type: ignore[arg-type]
    if sum(counts) <= SMALL_ROUND:
        for send in keyed:
            assert send.new_hashes is not None and send.new_rows is not None
            for hashed, row in zip(send.new_hashes.tolist(), send.new_rows.tolist(), strict=True):
                where = (send.queue_id, send.first_queue_offset + row, send.first_commit_log_offset + row)
                window.add_one(store_timestamp, hashed, where)
        return
    rows = np.concatenate([r.new_rows for r in keyed])

    def per_row(values: list[int]) -> np.ndarray:
        return np.repeat(np.array(values, dtype=np.int64), counts)

    window.add(
        store_timestamp,
        np.concatenate([r.new_hashes for r in keyed]),
        per_row([r.queue_id for r in keyed]),
        per_row([r.first_queue_offset for r in keyed]) + rows,
        per_row([r.first_commit_log_offset for r in keyed]) + rows,
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


def _round_key_hashes(sends: list[AppendRequest]) -> tuple[np.ndarray, np.ndarray]:
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


def arrow_key_hashes(send: AppendRequest) -> tuple[np.ndarray, np.ndarray]:
    assert send.arrow is not None
    return key_hashes([send.topic], [send.count], send.arrow.column("uniq_key").cast(pa.string()))


def _body(send: AppendRequest, row: int) -> bytes:
    """The body of row `row` of a send not yet cut down to its kept rows."""
    if send.messages is not None:
        return send.messages[row].body
    assert send.arrow is not None
    body: bytes = send.arrow.column("body")[row].as_py()
    return body


def _drop_rows(send: AppendRequest) -> None:
    """Keep only the rows of `send` that are not duplicates."""
    keep = np.ones(send.count, dtype=bool)
    keep[list(send.duplicate_of)] = False
    send.kept = np.flatnonzero(keep)
    if send.messages is not None:
        send.messages = [send.messages[i] for i in send.kept.tolist()]
        return
    assert send.arrow is not None
    mask = pa.array(keep)
    send.arrow = send.arrow.filter(mask)
    if send.arrow_properties is not None:
        send.arrow_properties = send.arrow_properties.filter(mask)
