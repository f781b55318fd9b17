"""One transactional batch write of many rows (20,000,000 by default) under Spark's default
`spark.driver.maxResultSize` (1 GiB), into a fresh default-flavor broker: the figure of goal 4 of
issue 40 (docs/spark.md, "Transactions"). Not a scenario of `python -m bench`: it writes some 20 GB.

    python -m bench.spark_sink_large [ROWS]

Spark collects every task's commit message on the driver; the sink's is per broker a half-queue
offset range and a count, so its size does not grow with the rows (the previous sink sent ~100 bytes
a row, which capped a batch near 7M rows). The write sets `transactionMaxOpenSeconds` past its
duration, so no check asks about the open batch. It records the rows stored, the time, the batch
record's size and what the commit messages weigh pickled.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import sys
import tempfile
import time
from pathlib import Path

from bench.cluster import cluster
from bench.report import progress, record
from bench.spark_sink import bodies, fresh_topic, stored
from rocketspark.spark.session import local_session
from rocketspark.spark.sink.transactional.record import BatchRecord
from rocketspark.spark.sink.transactional.sending import TaskHalves
from rocketspark.spark.sink.transactional.writers import TransactionalCommitMessage

DEFAULT_ROWS = 20_000_000
TOPIC = "BenchSinkLarge"


async def main(rows: int) -> None:
    with cluster() as target, tempfile.TemporaryDirectory(prefix="rocketspark-bench-large-") as tmp:
        spark = local_session(
            "rocketspark-bench-sink-large", master="local[2]", **{"spark.ui.showConsoleProgress": "false"}
        )
        try:
            max_result = spark.sparkContext.getConf().get("spark.driver.maxResultSize", "1g (the default)")
            await fresh_topic(target, TOPIC)
            log = Path(tmp) / "txn"
            progress(f"writing {rows:,} rows transactionally (maxResultSize {max_result})")
            started = time.perf_counter()
            (
                bodies(spark, rows)
                .write.format("rocketmq")
                .option("nameserver", target.namesrv_addr)
                .option("topic", TOPIC)
                .option("transactional", "true")
                .option("transactionLog", str(log))
                .option("txnAppId", "large")
                .option("txnVersion", "1")
                .option("transactionMaxOpenSeconds", "7200")
                .mode("append")
                .save()
            )
            elapsed = time.perf_counter() - started
        finally:
            spark.stop()
        held = await stored(target, TOPIC)
        record_file = log / "txn-large-1.json"
        record_bytes = record_file.read_bytes()
        committed = BatchRecord.from_json(record_bytes)
        messages = [
            TransactionalCommitMessage(TaskHalves(span.attempt, str(record_file), span.count, (span,)))
            for span in committed.ranges
        ]
        commit_log_gib = target.commit_log_bytes() / 2**30
    progress(f"{held:,} rows stored in {elapsed:.0f} s: {held / elapsed:,.0f} rows/s")
    if held != rows:
        raise RuntimeError(f"the transactional sink wrote {rows:,} rows but the broker holds {held:,}")
    table = [
        [
            rows,
            held,
            round(elapsed),
            round(held / elapsed),
            len(record_bytes),
            len(committed.ranges),
            max(len(pickle.dumps(m)) for m in messages),
            round(commit_log_gib, 1),
            max_result,
        ]
    ]
    columns = [
        "rows",
        "stored",
        "seconds",
        "rows/s",
        "record bytes",
        "ranges",
        "commit message bytes (pickled, largest)",
        "commit log GiB",
        "maxResultSize",
    ]
    record("spark-sink-large", columns, table, {"record": json.loads(record_bytes)})


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_ROWS))
