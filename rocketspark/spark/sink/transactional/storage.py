"""Where the batch records are kept: a local directory, or a file system pyarrow opens.

`transactionLog` (by default beside the checkpoint) is a local path (a `file:` URI is one) or a URI
of a file system pyarrow's `FileSystem.from_uri` opens: `hdfs://`, `s3://` (Spark's `s3a://` is
taken as it), `gs://`, `abfs://`. Only the driver's Python workers read and write the records (the
executors never do: listener.py), so a log the executors cannot reach works.

Local records (`LocalRecords`) are written durably (a temporary file, fsync, rename, fsync of the
directory, and of each directory made) and locked with `flock` beside them. Records elsewhere
(`FsRecords`) are written whole under a temporary name and moved into place (an object store makes
the object visible whole), and locked on the driver's host (`flock` of a file in its temporary
directory named by the record's URI): every process that decides a commit is a Python worker of the
driver, on one host.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import posixpath
import tempfile
import uuid
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

import pyarrow.fs as pafs

from rocketspark.errors import ConfigError
from rocketspark.fileutil import make_directories, write_atomically

#: URI schemes of pyarrow's networked file systems (s3a: Hadoop's name of s3); pyarrow's others (as
#: its in-memory `mock:`) are taken too once pyarrow opens them
REMOTE_SCHEMES = frozenset({"hdfs", "viewfs", "s3", "s3a", "gs", "gcs", "abfs", "abfss"})


class Records(Protocol):
    """Files of one transaction log's file system, by path or URI (as `join` makes them)."""

    def read(self, path: str) -> bytes | None:
        """The file's bytes; None when there is none (OSError when it cannot be read)."""
        ...

    def write(self, path: str, data: bytes) -> None:
        """Replace the file with `data` whole, its directories made as needed."""
        ...

    def version(self, path: str) -> tuple[int, int] | None:
        """(modification time in ns, size), None when there is no file."""
        ...

    def names(self, directory: str) -> list[str]:
        """The names of the files in `directory` (none when it does not exist)."""
        ...

    def delete(self, path: str) -> None:
        """Remove the file and its lock, if there."""
        ...

    def lock_file(self, path: str) -> Path:
        """The local file whose `flock` is the record's lock (its directory made)."""
        ...


def is_local(location: str) -> bool:
    parsed = urlparse(location)
    return not parsed.scheme or parsed.scheme == "file" or len(parsed.scheme) == 1  # a Windows drive letter


def normalize(name: str, location: str) -> str:
    """The option `name`'s value as a record location: an absolute local path, or the URI of a file
    system pyarrow opens; ConfigError for another scheme."""
    if is_local(location):
        parsed = urlparse(location)
        return str(Path(parsed.path if parsed.scheme == "file" else location).absolute())
    scheme = urlparse(location).scheme.lower()
    if scheme not in REMOTE_SCHEMES:  # those need a network (and credentials) to open: opened when used
        try:
            pafs.FileSystem.from_uri(location)
        except (ValueError, OSError, NotImplementedError) as exc:
            raise ConfigError(
                f"option {name}: {location!r} is neither a local path nor a URI of a file system pyarrow opens "
                f"({', '.join(sorted(REMOTE_SCHEMES))}, ...): set transactionLog to one of those"
            ) from exc
    return location.rstrip("/")


def join(location: str, *names: str) -> str:
    """`location` (a local path or URI) and names below it."""
    return str(Path(location, *names)) if is_local(location) else posixpath.join(location, *names)


def records_of(location: str) -> Records:
    """The records of the file system holding `location`."""
    return LOCAL if is_local(location) else _remote(urlparse(location).scheme.lower(), urlparse(location).netloc)


class LocalRecords:
    """Records in a local directory (or one every host mounts at the same place)."""

    def read(self, path: str) -> bytes | None:
        try:
            return Path(path).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, path: str, data: bytes) -> None:
        target = Path(path)
        make_directories(target.parent)
        write_atomically(target, data)

    def version(self, path: str) -> tuple[int, int] | None:
        try:
            stat = Path(path).stat()
        except FileNotFoundError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def names(self, directory: str) -> list[str]:
        try:
            return [entry.name for entry in Path(directory).iterdir()]
        except FileNotFoundError:
            return []

    def delete(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)
        Path(f"{path}.lock").unlink(missing_ok=True)

    def lock_file(self, path: str) -> Path:
        lock = Path(f"{path}.lock")
        make_directories(lock.parent)
        return lock


class FsRecords:
    """Records on a pyarrow file system: a record's URI is `root_uri` (the file system's scheme and
    authority) and a path, which is `root_path` and that path on the file system (for an object
    store, `root_path` is the bucket)."""

    def __init__(self, fs: pafs.FileSystem, root_uri: str, root_path: str = "") -> None:
        self.fs = fs
        self.root_uri = root_uri
        self.root_path = root_path.rstrip("/")

    def _path(self, location: str) -> str:
        if not location.startswith(self.root_uri):
            raise ValueError(f"{location} is not on the file system of {self.root_uri}")
        return self.root_path + (location[len(self.root_uri) :] or "/")

    def read(self, path: str) -> bytes | None:
        try:
            with self.fs.open_input_stream(self._path(path)) as stream:
                data: bytes = stream.read()
                return data
        except FileNotFoundError:
            return None

    def write(self, path: str, data: bytes) -> None:
        target = self._path(path)
        self.fs.create_dir(posixpath.dirname(target), recursive=True)
        temporary = f"{target}.{uuid.uuid4().hex}.tmp"
        with self.fs.open_output_stream(temporary) as stream:
            stream.write(data)
        try:
            self.fs.move(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                self.fs.delete_file(temporary)
            raise

    def version(self, path: str) -> tuple[int, int] | None:
        info = self.fs.get_file_info(self._path(path))
        if info.type is pafs.FileType.NotFound:
            return None
        return int(info.mtime_ns or 0), int(info.size or 0)

    def names(self, directory: str) -> list[str]:
        selector = pafs.FileSelector(self._path(directory), allow_not_found=True)
        return [posixpath.basename(info.path) for info in self.fs.get_file_info(selector)]

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self._path(path))
        self.lock_file(path).unlink(missing_ok=True)

    def lock_file(self, path: str) -> Path:
        directory = Path(tempfile.gettempdir()) / "rocketspark-transaction-locks"
        directory.mkdir(exist_ok=True)
        return directory / f"{hashlib.sha256(path.encode()).hexdigest()}.lock"


LOCAL = LocalRecords()


@lru_cache(maxsize=16)
def _remote(scheme: str, netloc: str) -> FsRecords:
    """The file system of `scheme://netloc`, opened once per process."""
    try:
        fs, root_path = pafs.FileSystem.from_uri(f"{'s3' if scheme == 's3a' else scheme}://{netloc}/")
    except (ValueError, OSError, NotImplementedError) as exc:
        raise ConfigError(
            f"transactionLog: pyarrow cannot open {scheme}://{netloc} ({str(exc).splitlines()[0]}); set "
            "transactionLog to a local path "
            "or a URI of a file system pyarrow opens, with its credentials where pyarrow looks for them"
        ) from exc
    return FsRecords(fs, f"{scheme}://{netloc}", root_path)


@contextlib.contextmanager
def flocked(lock_file: Path, *, wait: bool) -> Iterator[bool]:
    """Hold `flock` of `lock_file` (waiting for it, or only if it is free); whether it is held."""
    with lock_file.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
