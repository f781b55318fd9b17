"""Two batch reads of `bench spark-source` (issue 26), each against the same read without the option:

- "minPartitions": one queue of the topic (fewer queues than the session's 2 cores) read whole, in
  one Spark partition, then with `minPartitions=2` (two parts read side by side);
- "pushdown": the last 1% of the topic by time (`storeTimestamp >=` the store time of the message
  at 99% of queue 0) with `spark.sql.python.filterPushdown.enabled` on, then off (Spark filtering a
  full read); the messages the broker sent for each (its pull counters) show the saving.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.cluster import Cluster
from bench.consume import TOPIC
from bench.report import progress
from rocketspark.client.api.admin import get_runtime_info
from rocketspark.remoting.client import RemotingClient
from rocketspark.spark.options import parse
from rocketspark.spark.source.reading import puller_for, read_range
from rocketspark.spark.source.splitting import QueueRange

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"

#: a batch read of TOPIC with these options (bench.spark_source.source, streaming=False)
Read = Callable[..., DataFrame]


def min_partitions(read: Read, stored: dict[int, int], broker: str) -> dict[str, Any]:
    """Queue 0 read in one partition, then with minPartitions=2: rows, partitions, seconds each."""
    first = min(stored)
    starting = json.dumps({TOPIC: {broker: {str(q): -2 if q == first else -1 for q in stored}}})
    figures: dict[str, Any] = {}
    for name, options in (("one partition", {}), ("minPartitions=2", {"minPartitions": "2"})):
        frame = read(startingOffsets=starting, **options)
        started = time.perf_counter()
        rows = frame.count()
        seconds = time.perf_counter() - started
        figures[name] = {"rows": rows, "partitions": frame.rdd.getNumPartitions(), "seconds": seconds}
        progress(f"one queue, {name}: {rows:,} rows in {seconds:.1f} s")
    return figures


def pushdown(spark: SparkSession, read: Read, target: Cluster, stored: dict[int, int], broker: str) -> dict[str, Any]:
    """The last 1% by time with pushdown on and off: rows, seconds, messages the broker sent."""
    first = min(stored)
    since = _store_time(target, broker, first, int(stored[first] * 0.99))
    figures: dict[str, Any] = {"since": since.isoformat()}
    for name, enabled in (("with pushdown", True), ("without pushdown", False)):
        spark.conf.set(PUSHDOWN, str(enabled).lower())
        try:
            before = asyncio.run(_pulled(target))
            started = time.perf_counter()
            rows = read().filter(F.col("storeTimestamp") >= F.lit(since)).count()
            seconds = time.perf_counter() - started
            sent = asyncio.run(_pulled(target)) - before
        finally:
            spark.conf.unset(PUSHDOWN)
        figures[name] = {"rows": rows, "seconds": seconds, "messages_read": sent}
        progress(f"last 1% by time, {name}: {rows:,} rows, {sent:,} messages read, {seconds:.1f} s")
    assert figures["with pushdown"]["rows"] == figures["without pushdown"]["rows"], "pushdown changed the result"
    return figures


def table_rows(split: dict[str, Any], pushed: dict[str, Any]) -> list[list[Any]]:
    """Rows of the spark-source table (read, rows, seconds, rows/s; the other columns "-")."""
    reads = [(f"one queue, {k}", v) for k, v in split.items()]
    reads += [(f"last 1% by time, {k}", v) for k, v in pushed.items() if k != "since"]
    return [[name, f["rows"], round(f["seconds"], 1), round(f["rows"] / f["seconds"]), *["-"] * 4] for name, f in reads]


def _store_time(target: Cluster, broker: str, queue_id: int, offset: int) -> dt.datetime:
    options = parse({"nameserver": target.namesrv_addr, "topic": TOPIC}, streaming=False)
    batch = next(read_range(puller_for(options), options, QueueRange(TOPIC, broker, queue_id, offset, offset + 1)))
    stamp: dt.datetime = batch.column("storeTimestamp")[0].as_py()
    return stamp


async def _pulled(target: Cluster) -> int:
    """Messages the broker has sent in answer to pulls (standard and Arrow)."""
    client = RemotingClient()
    try:
        info = await get_runtime_info(client, target.broker.address)
    finally:
        await client.close()
    return sum(int(v) for k, v in info.items() if k.endswith("PullMessages"))
