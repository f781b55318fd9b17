"""`spark.read.format("rocketmq")`: a bounded DataFrame between two positions, with filters pushed
down (`rocketspark.spark.source.pushdown`) when the session turns Python data source pushdown on and the
running Spark keeps what a read pushed within the scan that pushed it (`SCAN_SCOPED_PUSHDOWN`)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from functools import cache
from types import FrameType
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition

from rocketspark.spark import versions
from rocketspark.spark.options import SourceOptions
from rocketspark.spark.source.planning import plan_partitions
from rocketspark.spark.source.positions import require_named_queues, resolve
from rocketspark.spark.source.pushdown import Bounds, Pushed, narrow, push
from rocketspark.spark.source.queue_view import QueueView
from rocketspark.spark.source.reading import read_partition

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter

log = logging.getLogger(__name__)

#: the PySpark worker that plans a read with pushFilters; it runs instead of plan_data_source_read
#: when spark.sql.python.filterPushdown.enabled is true (PySpark 4.1 and newer; 4.0 has neither)
PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"

#: whether this PySpark keeps a pushed read within its own scan. PySpark 4.1 to 4.3 do not:
#: `PythonScanBuilder.pushFilters` stores the read that the pushing reader planned (its partitions
#: and its pickled reader) on the relation's `PythonDataSourceV2` (`ds.setReadInfo`), and every
#: later scan of the same DataFrame takes it from there (`PythonBatch` ->
#: `ds.getOrCreateReadInfo`) without asking Python again: a query without filters, or a join of
#: two differently filtered views, would read what the last filtered query pushed. Nothing reaches
#: the data source that tells one scan from another, so on those versions the source takes no
#: filter (Spark applies them all). Spark 5.0 keeps the read info in the scan (SPARK-58551).
SCAN_SCOPED_PUSHDOWN = versions.has(versions.SCAN_SCOPED_PUSHDOWN)


@cache
def _warn_pushdown_off() -> None:
    """Once per Python worker: the session asked for pushdown, and the source does not push."""
    log.warning(
        "spark.sql.python.filterPushdown.enabled is true, but PySpark %s would let one filtered read "
        "of a DataFrame narrow every later read of it (SPARK-58551, fixed in Spark 5.0): the rocketmq "
        "source takes no filters on this version and Spark applies them (the rows are right; the read "
        "is not narrowed); see docs/spark.md, 'Filter pushdown'",
        versions.PYSPARK_VERSION,
    )


def batch_reader(options: SourceOptions) -> RocketMQBatchReader:
    """The reader for this planning: one that takes filters when PySpark plans the read with
    pushdown on and keeps a pushed read in its scan (`SCAN_SCOPED_PUSHDOWN`), else one without
    pushFilters (whose base `pushFilters` hands every filter back to Spark).

    PySpark 4.3 fails every read of a reader that implements pushFilters while
    spark.sql.python.filterPushdown.enabled is false (DATA_SOURCE_PUSHDOWN_DISABLED), and gives a
    data source no Spark settings. It asks for the reader from one of two Python workers: from
    data_source_pushdown_filters (which then calls pushFilters) when the setting is true, from
    plan_data_source_read otherwise. So the reader follows the worker that asks for it: by its
    module's name, or by its `__spec__` when the worker runs as `python -m` (its `__name__` is then
    `__main__`), as it does with spark.python.use.daemon=false."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        spec = frame.f_globals.get("__spec__")
        if PUSHDOWN_WORKER in (frame.f_globals.get("__name__"), getattr(spec, "name", None)):
            if SCAN_SCOPED_PUSHDOWN:
                return RocketMQPushdownReader(options)
            _warn_pushdown_off()
            break
        frame = frame.f_back
    return RocketMQBatchReader(options)


class RocketMQBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.pushed = Pushed()

    def partitions(self) -> Sequence[InputPartition]:
        """Resolved on the driver when Spark plans the read: from `startingOffsets` (or
        `startingTimestamp`, `startingOffsetsByTimestamp`) to `endingOffsets` (or `endingTimestamp`,
        `endingOffsetsByTimestamp`), cut to the pushed filters. Every queue's broker must answer
        (after retries): a bounded read never leaves a queue out."""
        view = QueueView(self.options)
        every = view.queues(must_exist=True)
        require_named_queues(self.options.starting, every, "startingOffsetsByTimestamp")
        require_named_queues(self.options.ending, every, "endingOffsetsByTimestamp")
        queues = [q for q in every if self.pushed.keeps(q)]
        group = self.options.consumer_group
        start = resolve(view, queues, self.options.starting, group, strict=True)
        end = resolve(view, queues, self.options.ending, group)
        times = self.pushed.time_lookups_ms
        low = view.offsets_for_timestamp(queues, times.low) if times.low is not None else {}
        high = view.offsets_for_timestamp(queues, times.high) if times.high is not None else {}
        view.require_reachable("plan the batch read")
        start, end = narrow(start, end, self.pushed, {q: (low.get(q), high.get(q)) for q in queues})
        if self.pushed.tag_expression(self.options.tags) is None:
            return []  # no tag both subscribed and asked for
        return plan_partitions(start, {q: max(end[q], start[q]) for q in queues}, self.options.partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        tags = self.pushed.tag_expression(self.options.tags)
        if tags is None:
            return
        times = self.pushed.store_time_us
        for batch in read_partition(replace(self.options, tags=tags), partition):
            kept = batch if times == Bounds() else batch.filter(_within(batch.column("storeTimestamp"), times))
            if kept.num_rows:
                yield kept


def _within(stamps: pa.Array, bounds: Bounds) -> pa.Array:
    """Which timestamps lie in `bounds` (µs)."""
    micros = pc.cast(stamps, pa.int64())
    masks = [pc.greater_equal(micros, bounds.low)] if bounds.low is not None else []
    masks += [pc.less(micros, bounds.high)] if bounds.high is not None else []
    return masks[0] if len(masks) == 1 else pc.and_(*masks)


class RocketMQPushdownReader(RocketMQBatchReader):
    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Take the filters the read guarantees (see `rocketspark.spark.source.pushdown`); Spark checks
        the others it gets back."""
        self.pushed, left = push(filters)
        log.info(
            "rocketmq read of %s: pushed %s; left to Spark %s",
            ", ".join(self.options.topics) or self.options.topic_pattern,
            list(self.pushed.taken) or "nothing",
            left or "nothing",
        )
        return left
