"""What the running PySpark offers of the Python data source API, and the one error for an option
that needs a newer PySpark (docs/spark.md, "Spark versions").

The connector runs on PySpark 4.0 to 4.3. Checked against the installed packages of each (4.0.5,
4.1.4, 4.2.1, 4.3.0; `pyspark/sql/datasource.py`, `pyspark/sql/streaming/` and the workers in
`pyspark/sql/worker/`):

- 4.0: the API itself; readers may yield Arrow record batches; `DataSourceArrowWriter`. The
  write worker hands Arrow batches to any writer that is a `DataSourceArrowWriter`, a stream
  writer too, so the sink's stream writers take Arrow on 4.0 as a subclass of both
  (`StreamArrowWriter`). A stream reader's `latestOffset()` takes no argument.
- 4.1: `DataSourceStreamArrowWriter` (SPARK-53030); `DataSourceReader.pushFilters` and the
  `Filter` classes (`spark.sql.python.filterPushdown.enabled`).
- 4.2: streaming admission control (SPARK-55304): `latestOffset(start, limit)`,
  `getDefaultReadLimit`, `reportLatestOffset`, the `ReadLimit` classes and
  `SupportsTriggerAvailableNow`, in the new module `pyspark.sql.streaming.datasource`.
- 5.0 (not released): a pushed read kept within its own scan (SPARK-58551), see
  `rocketspark.spark.source.batch_reader`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pyspark
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter

from rocketspark.errors import ConfigError


def parse_version(text: str) -> tuple[int, int]:
    """(major, minor) of a PySpark version such as `4.1.4` or `4.2.0.dev1`."""
    matched = re.match(r"(\d+)\.(\d+)", text)
    if matched is None:
        raise ValueError(f"{text!r} is not a PySpark version")
    return int(matched.group(1)), int(matched.group(2))


PYSPARK_VERSION: str = pyspark.__version__
RUNNING = parse_version(PYSPARK_VERSION)

#: `DataSourceStreamArrowWriter`
STREAM_ARROW_WRITER = (4, 1)
#: `DataSourceReader.pushFilters`
FILTER_PUSHDOWN = (4, 1)
#: `spark.dataSource.register` of a name a Python data source already has (SPARK-51919)
REREGISTER = (4, 1)
#: a batch DataFrame keeps the read its first plan made (`PythonDataSourceV2.getOrCreateReadInfo`);
#: before, every query of it plans the read again
BATCH_READ_KEPT = (4, 1)
#: `latestOffset(start, limit)`, `getDefaultReadLimit`, `reportLatestOffset`, `SupportsTriggerAvailableNow`
ADMISSION_CONTROL = (4, 2)
#: a pushed read kept within the scan that pushed it
SCAN_SCOPED_PUSHDOWN = (5, 0)


def has(since: tuple[int, int]) -> bool:
    """Whether the running PySpark is `since` or newer."""
    return since <= RUNNING


class SparkVersionError(ConfigError):
    """An option (or a call) needs a newer PySpark than the one running."""


def require(since: tuple[int, int], what: str, why: str, instead: str = "") -> None:
    """SparkVersionError naming `what`, the version it needs (for `why`) and the running one, and
    what to do `instead` (default: upgrade or leave `what` out), unless the running one has it."""
    if not has(since):
        raise SparkVersionError(
            f"{what} needs PySpark {since[0]}.{since[1]} or newer ({why}); this is PySpark {PYSPARK_VERSION}: "
            f"{instead or f'upgrade PySpark or leave {what} out'}"
        )


if TYPE_CHECKING or has(STREAM_ARROW_WRITER):
    from pyspark.sql.datasource import DataSourceStreamArrowWriter

    StreamArrowWriter = DataSourceStreamArrowWriter
else:

    class StreamArrowWriter(DataSourceStreamWriter, DataSourceArrowWriter):
        """PySpark 4.0's stream writer that takes Arrow batches: its write worker picks the Arrow
        path for any `DataSourceArrowWriter`, and its commit worker calls `commit(messages,
        batchId)` of a stream writer."""
