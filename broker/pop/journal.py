"""The pop engine's files under `<storePathRootDir>/pop/`: numbered journals and one snapshot.

Records (broker/pop/records.py) are appended to the open journal `journal.<n>`; a caller awaits
:meth:`written` before it answers, so an answer never promises what a kill -9 could lose. As the
commit log does, SYNC_FLUSH fsyncs every write before its callers go on (on the journal's own I/O
thread, the records of one turn of the event loop in one write and one fsync); ASYNC_FLUSH fsyncs
every flushIntervalCommitLog ms, and writes on the loop what is pending when a caller asks for it
(a receive's deliveries, an ack: a few hundred bytes copied to the page cache cost less than a hop
to the I/O thread and back), or at the end of the turn for records nobody awaits. Once the open
journal passes ROTATE_BYTES, the engine's state is written as `snapshot` (atomically, fsynced)
naming the journal it covers, a new journal is opened and the covered ones are deleted, so the
files stay bounded however long the broker runs. A torn last line (a crash in the middle of a
write) ends the replay of its journal.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from broker.pop.records import PopTables
from rocketspark.fileutil import fsync_directory, write_atomically

log = logging.getLogger(__name__)

#: journal bytes after which the state is snapshotted and the journal started again
ROTATE_BYTES = 8 * 1024 * 1024
#: most pending bytes written on the event loop under ASYNC_FLUSH (more go to the I/O thread)
WRITE_ON_LOOP_BYTES = 64 * 1024
SNAPSHOT_NAME = "snapshot"
JOURNAL_PREFIX = "journal."


def journal_numbers(directory: Path) -> list[int]:
    numbers = []
    for path in directory.glob(JOURNAL_PREFIX + "*"):
        suffix = path.name[len(JOURNAL_PREFIX) :]
        if suffix.isdigit():
            numbers.append(int(suffix))
    return sorted(numbers)


def read_records(path: Path) -> Iterator[list[Any]]:
    """The records of one journal, up to a torn or unreadable line."""
    with path.open("rb") as file:
        for number, raw in enumerate(file, 1):
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                log.warning("pop journal %s ends in a torn record at line %d; replay stops there", path, number)
                return
            if not isinstance(record, list) or len(record) < 5:
                log.warning("pop journal %s has a malformed record at line %d; replay stops there", path, number)
                return
            yield record


class PopJournal:
    """Appends records, durably enough for the store's flush policy, and rotates with snapshots."""

    def __init__(self, directory: Path, *, sync: bool, snapshot: Callable[[int], bytes]) -> None:
        """`snapshot(n)`: the engine's whole state, covering journals up to n, taken on the event loop."""
        self.directory = directory
        self.sync = sync
        self._snapshot = snapshot
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pop-journal")
        self._number = 0
        self._fd = -1
        self._size = 0
        self._unsynced = False
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None
        self._scheduled = False  # a write at the end of this turn of the loop
        self.rotations = 0

    # -- start-up ------------------------------------------------------------------------------

    async def load(self) -> PopTables:
        """The state the files hold. The files then start over: one snapshot of it, and journal
        `n + 1` (n: the last one read) open for this run's records."""
        return await asyncio.get_running_loop().run_in_executor(self._io, self._load)

    def _load(self) -> PopTables:
        self.directory.mkdir(parents=True, exist_ok=True)
        snapshot_path = self.directory / SNAPSHOT_NAME
        if snapshot_path.exists():
            tables, covered = PopTables.decode_snapshot(snapshot_path.read_bytes())
        else:
            tables, covered = PopTables(), 0
        replayed = 0
        for number in journal_numbers(self.directory):
            if number > covered:
                replayed += tables.replay(read_records(self.directory / f"{JOURNAL_PREFIX}{number}"))
            covered = max(covered, number)
        self._start_over(covered, tables.encode_snapshot(covered))
        log.info(
            "pop state loaded from %s: %d group topics, %d messages in flight, %d journal records replayed",
            self.directory,
            len(tables.topics),
            sum(state.in_flight_count() for state in tables.topics.values()),
            replayed,
        )
        return tables

    def _start_over(self, covered: int, state: bytes) -> None:
        """Write `state` (covering every journal up to `covered`) as the snapshot, delete those
        journals and open journal `covered + 1`."""
        write_atomically(self.directory / SNAPSHOT_NAME, state)
        for number in journal_numbers(self.directory):
            if number <= covered:
                (self.directory / f"{JOURNAL_PREFIX}{number}").unlink()
        self._number = covered + 1
        self._fd = os.open(self.directory / f"{JOURNAL_PREFIX}{self._number}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._size = os.fstat(self._fd).st_size
        fsync_directory(self.directory)

    # -- appending (on the event loop) ---------------------------------------------------------

    @property
    def number(self) -> int:
        """The open journal's number."""
        return self._number

    def append(self, record: bytes) -> None:
        self._pending.append(record)
        self._pending_bytes += len(record)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._write_pending)

    def written(self) -> asyncio.Future[None]:
        """Done once every record appended so far is written (and fsynced, with SYNC_FLUSH)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._pending and self._on_loop():
            self._write_on_loop()
        if not self._pending and self._idle():
            future.set_result(None)
        else:
            self._waiters.append(future)
        return future

    def _idle(self) -> bool:
        return self._task is None or self._task.done()

    def _on_loop(self) -> bool:
        """Whether what is pending may be written on the loop, now."""
        return (
            not self.sync
            and self._idle()
            and self._pending_bytes <= WRITE_ON_LOOP_BYTES
            and self._size + self._pending_bytes <= ROTATE_BYTES
        )

    def _take(self) -> tuple[list[bytes], list[asyncio.Future[None]]]:
        """The pending records and the callers waiting for them (and for any before them)."""
        lines, self._pending, self._pending_bytes = self._pending, [], 0
        waiters, self._waiters = self._waiters, []
        return lines, waiters

    def _write_on_loop(self) -> None:
        lines, waiters = self._take()
        try:
            self._write(lines)
        except OSError as exc:
            log.exception("could not write the pop journal in %s", self.directory)
            _answer(waiters, exc)
            return
        _answer(waiters, None)

    def _write_pending(self) -> None:
        """End of the turn of the loop that appended: write what nobody has asked for yet."""
        self._scheduled = False
        if not self._pending or not self._idle():
            return  # written already, or the running drain takes it
        if self._on_loop():
            self._write_on_loop()
        else:
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="pop-journal-write")

    async def _drain(self) -> None:
        """Write on the I/O thread (SYNC_FLUSH, many records, or a rotation) until nothing is pending."""
        loop = asyncio.get_running_loop()
        while self._pending or self._waiters:
            lines, waiters = self._take()  # those of an earlier write are answered by this one
            try:
                if self._size + sum(map(len, lines)) > ROTATE_BYTES:
                    state = self._snapshot(self._number)  # covers `lines`: they were appended before it
                    await loop.run_in_executor(self._io, self._rotate, lines, state)
                elif lines:
                    await loop.run_in_executor(self._io, self._write, lines)
            except OSError as exc:
                log.exception("could not write the pop journal in %s", self.directory)
                _answer(waiters, exc)
                continue
            _answer(waiters, None)

    def _write(self, lines: list[bytes]) -> None:
        data = b"".join(lines)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._size += len(data)
        if self.sync:
            os.fsync(self._fd)
        else:
            self._unsynced = True

    def _rotate(self, lines: list[bytes], state: bytes) -> None:
        self._write(lines)
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self._unsynced = False
        self._start_over(self._number, state)
        self.rotations += 1

    async def flush(self) -> None:
        """fsync what was written since the last fsync (ASYNC_FLUSH's periodic flush)."""
        if self._unsynced:
            self._unsynced = False
            await asyncio.get_running_loop().run_in_executor(self._io, self._fsync)

    def _fsync(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    async def close(self, state: Callable[[int], bytes] | None = None) -> None:
        """Write what is pending; with `state`, leave a snapshot covering everything, for a quick start."""
        while self._pending or not self._idle():
            task = self._task
            if task is None or task.done():
                task = self._task = asyncio.get_running_loop().create_task(self._drain(), name="pop-journal-write")
            await asyncio.shield(task)
        loop = asyncio.get_running_loop()
        if state is not None and self._fd >= 0:
            await loop.run_in_executor(self._io, self._rotate, [], state(self._number))
        await loop.run_in_executor(self._io, self._close_file)
        self._io.shutdown(wait=True)

    def _close_file(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1


def _answer(waiters: list[asyncio.Future[None]], error: OSError | None) -> None:
    for waiter in waiters:
        if waiter.done():
            continue
        if error is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(error)
