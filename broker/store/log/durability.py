"""Making new files survive a power loss: fsyncing a file saves its data, not its name.

A file created in a directory is only reachable after a power loss once the directory itself is
fsynced, and a new directory only once its parent is. Store code calls these (blocking, on the
store's I/O thread) before anything vouches for a new file: an acknowledged SYNC_FLUSH send, the
flushed offset, the checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from rocketspark.fileutil import fsync_directory


def make_directories(directory: Path) -> None:
    """`mkdir -p` whose new directories are durable: each one's parent is fsynced after it is made."""
    missing: list[Path] = []
    current = directory
    while not current.is_dir():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
        fsync_directory(path.parent)
