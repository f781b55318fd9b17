"""Where the transactional sink keeps its batch records (`transactionLog`): local paths and `file:` URIs
on the local disk, other URIs on the pyarrow file system that opens them, through pyarrow's
FileSystem interface (a mock file system and a sub-tree of the local one here: no object store runs
offline); options naming them, and the default beside a checkpoint on any of them."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from rocketspark.errors import ConfigError
from rocketspark.spark.sink.transactional.options import transaction_log_option
from rocketspark.spark.sink.transactional.record import BatchRecord, HalfRange, RecordState
from rocketspark.spark.sink.transactional.storage import (
    LOCAL,
    FsRecords,
    Records,
    flocked,
    join,
    normalize,
    records_of,
)


@pytest.mark.parametrize(
    ("given", "taken"),
    [
        ("s3a://bucket/checkpoints/q1", "s3a://bucket/checkpoints/q1/rocketmq-transactions"),
        ("hdfs://namenode:8020/ckpt/", "hdfs://namenode:8020/ckpt/rocketmq-transactions"),
        ("gs://bucket/ckpt", "gs://bucket/ckpt/rocketmq-transactions"),
        (
            "abfss://data@account.dfs.core.windows.net/ckpt",
            "abfss://data@account.dfs.core.windows.net/ckpt/rocketmq-transactions",
        ),
    ],
)
def test_the_log_goes_beside_a_checkpoint_on_any_file_system_pyarrow_opens(given: str, taken: str) -> None:
    assert transaction_log_option({"checkpointlocation": given}) == taken


def test_local_paths_and_file_uris_are_local_and_other_schemes_are_refused(tmp_path: Path) -> None:
    assert transaction_log_option({"transactionlog": f"file://{tmp_path}/log"}) == str(tmp_path / "log")
    assert transaction_log_option({"transactionlog": "relative/log"}) == str(Path("relative/log").absolute())
    assert records_of(str(tmp_path)) is LOCAL and records_of(f"file://{tmp_path}") is LOCAL
    with pytest.raises(ConfigError, match="option transactionLog: 'ftp://host/log' is neither a local path"):
        normalize("transactionLog", "ftp://host/log")


def _exercise(records: Records, root: str) -> None:
    """What the sink does with records: write, read back, replace, list, delete; a missing one is None."""
    path = join(root, "query-id", "7.json")
    assert records.read(path) is None and records.version(path) is None
    ranges = (HalfRange("a1", "broker-a", 3, 90, 40, batched=True),)
    committing = BatchRecord(RecordState.COMMITTING, frozenset({"a1"}), ranges)
    records.write(path, committing.to_json())
    assert BatchRecord.from_json(records.read(path) or b"") == committing
    first = records.version(path)
    committed = BatchRecord(RecordState.COMMITTED, frozenset({"a1"}), ranges)
    records.write(path, committed.to_json())
    assert BatchRecord.from_json(records.read(path) or b"") == committed
    assert records.version(path) != first  # the listener reads a record again when its version changes
    records.write(join(root, "query-id", "8.json"), committed.to_json())
    assert sorted(records.names(join(root, "query-id"))) == ["7.json", "8.json"]  # no temporary file left
    assert records.names(join(root, "no-such-query")) == []
    with flocked(records.lock_file(path), wait=True), flocked(records.lock_file(path), wait=False) as again:
        assert not again  # one holder at a time, on the driver's host
    records.delete(path)
    assert records.read(path) is None and sorted(records.names(join(root, "query-id"))) == ["8.json"]


def test_records_on_a_pyarrow_file_system_by_uri() -> None:
    """An object store's URIs name the bucket first: `mock://bucket/log/...` is `bucket/log/...` on it."""
    _exercise(FsRecords(pafs._MockFileSystem(), "mock://bucket", "bucket"), "mock://bucket/log")


def test_records_on_a_sub_tree_of_a_file_system(tmp_path: Path) -> None:
    """A file system whose paths are the URI's (as HDFS's): here a sub-tree of the local disk."""
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    _exercise(FsRecords(fs, "tree://host", "/"), "tree://host/log")
    assert (tmp_path / "log" / "query-id" / "8.json").exists()


def test_records_by_a_uri_of_a_file_system_pyarrow_opens() -> None:
    """The option's own way: a `mock:` URI (pyarrow's in-memory file system, one per process) taken by
    the option and opened by pyarrow's `FileSystem.from_uri`, as an `s3://` or `hdfs://` one is."""
    log = transaction_log_option({"transactionlog": "mock://bucket/transactions/"})
    assert log == "mock://bucket/transactions"
    records = records_of(log)
    assert isinstance(records, FsRecords) and records is records_of(join(log, "query-id"))  # opened once
    _exercise(records, log)
