"""A Spark job for tests/security/test_client_spark.py, run in its own process so that everything the
driver logs (Spark at INFO, rocketspark at DEBUG, the local executors' Python workers) is its output.

Against a broker with ACL on it writes a topic with the sink (signed), streams it into another with
the source and the sink (signed, `availableNow`, a checkpoint), then runs reads and writes that must
be refused: unsigned, and with a wrong secret. The last stdout line is `RESULT <json>`: rows written
and read, the explain() texts, the last progress, and each refusal's error text.

    python tests/security/client_spark_job.py NAMESRV SOURCE_TOPIC SINK_TOPIC CHECKPOINT
    (ROCKETMQ_ACCESS_KEY, ROCKETMQ_SECRET_KEY and WRONG_SECRET in the environment)
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from rocketspark.logs import configure_logging
from rocketspark.spark.session import local_session

TIMEOUT_S = 120


def explained(frame: DataFrame) -> str:
    with contextlib.redirect_stdout(io.StringIO()) as text:
        frame.explain(extended=True)
    return text.getvalue()


def refusal(run: Any) -> str:
    """The error text of `run()`, which must fail."""
    try:
        run()
    except Exception as exc:
        return str(exc)
    raise AssertionError("expected a refusal")


def main(namesrv: str, source: str, sink: str, checkpoint: str) -> dict[str, Any]:
    signed = {"nameserver": namesrv, "accessKey": os.environ["ROCKETMQ_ACCESS_KEY"]}
    signed["secretKey"] = os.environ["ROCKETMQ_SECRET_KEY"]
    wrong = {**signed, "secretKey": os.environ["WRONG_SECRET"]}
    unsigned = {"nameserver": namesrv}
    spark: SparkSession = local_session("acl-job", master="local[2]", **{"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("INFO")
    result: dict[str, Any] = {}
    try:
        rows = spark.range(20).selectExpr("concat('row-', id) AS body")
        rows.write.format("rocketmq").options(**signed, topic=source).mode("append").save()
        stream = spark.readStream.format("rocketmq").options(
            **signed, topic=source, consumerGroup="acl_spark_group", startingOffsets="earliest"
        )
        query = (
            stream.load()
            .select("body")
            .writeStream.format("rocketmq")
            .options(**signed, topic=sink, checkpointLocation=checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(TIMEOUT_S)
        result["stream_error"] = str(query.exception()) if query.exception() else None
        result["last_progress"] = query.lastProgress and json.loads(query.lastProgress.json)
        with contextlib.redirect_stdout(io.StringIO()) as text:
            query.explain(extended=True)
        result["stream_explain"] = text.getvalue()
        read = spark.read.format("rocketmq").options(**signed, topic=sink).load()
        result["batch_explain"] = explained(read)
        result["sink_rows"] = sorted(r.body.decode() for r in read.select("body").collect())

        quick = {"topic": source, "pullTimeoutMs": "5000"}
        result["unsigned_read"] = refusal(
            lambda: spark.read.format("rocketmq").options(**unsigned, **quick).load().count()
        )
        result["wrong_read"] = refusal(lambda: spark.read.format("rocketmq").options(**wrong, **quick).load().count())
        failing = spark.readStream.format("rocketmq").options(
            **wrong, topic=source, consumerGroup="acl_spark_wrong", pullTimeoutMs="5000"
        )
        query = failing.load().writeStream.format("noop").trigger(availableNow=True).start()
        with contextlib.suppress(Exception):
            query.awaitTermination(TIMEOUT_S)
        result["wrong_stream"] = str(query.exception())
        result["unsigned_write"] = refusal(
            lambda: rows.write.format("rocketmq").options(**unsigned, topic=source).mode("append").save()
        )
    finally:
        spark.stop()
    return result


if __name__ == "__main__":
    configure_logging("DEBUG")
    logging.getLogger("py4j").setLevel(logging.INFO)
    print("RESULT " + json.dumps(main(*sys.argv[1:5])), flush=True)
