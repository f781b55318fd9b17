"""Atomic file replacement, for every piece of persisted configuration and metadata, a writer
that does it off the event loop, and durable directory entries."""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import Sequence
from concurrent.futures import Executor
from pathlib import Path

log = logging.getLogger(__name__)


def write_atomically(path: Path, data: bytes | Sequence[bytes | memoryview]) -> None:
    """Replace `path` with `data` (or its parts, in order) so that a crash leaves either the old or
    the new content.

    The data goes to a temporary file in the same directory, is fsynced, and is renamed over
    the target; the directory is fsynced so the rename itself survives a power loss. Parts are
    written as they are, without joining them first (large arrays: no copy, and the GIL is free
    while the file takes them).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            for part in [data] if isinstance(data, bytes) else data:
                tmp.write(part)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def make_directories(directory: Path) -> None:
    """`mkdir -p` whose new directories are durable: each one's parent is fsynced after it is made
    (a file written in a new directory, fsynced with it, is then not lost with the directory's name)."""
    missing: list[Path] = []
    current = directory
    while not current.is_dir():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
        fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make the names in `directory` (files created, renamed or removed in it) durable: fsyncing a
    file saves its data, not its name."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AtomicFileWriter:
    """Replaces one file atomically on an I/O thread, so the event loop never waits for an fsync.

    `write` may be called any number of times from the event loop: snapshots reach the disk in the
    order given, and one not written yet is replaced by a newer one. `flush` waits until the last
    snapshot is on disk. A failed write is logged; the next snapshot tries again.
    """

    def __init__(self, path: Path, executor: Executor) -> None:
        self.path = path
        self._executor = executor
        self._pending: bytes | None = None
        self._task: asyncio.Task[None] | None = None

    def write(self, data: bytes) -> None:
        self._pending = data
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain(), name=f"write {self.path.name}")

    async def flush(self) -> None:
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending is not None:
            data, self._pending = self._pending, None
            try:
                await loop.run_in_executor(self._executor, write_atomically, self.path, data)
            except OSError:
                log.exception("could not write %s; the next change tries again", self.path)
