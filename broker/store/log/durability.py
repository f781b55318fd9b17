"""Making new files survive a power loss: fsyncing a file saves its data, not its name.

A file created in a directory is only reachable after a power loss once the directory itself is
fsynced, and a new directory only once its parent is. Store code calls these (blocking, on the
store's I/O thread) before anything vouches for a new file: an acknowledged SYNC_FLUSH send, the
flushed offset, the checkpoint.
"""

from __future__ import annotations

from rocketspark.fileutil import fsync_directory, make_directories

__all__ = ["fsync_directory", "make_directories"]
