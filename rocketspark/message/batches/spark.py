"""Stored batches as the Spark source yields them: STORED_SCHEMA to SPARK_SCHEMA, a whole batch at a time."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.message.batches.arrays import require_schema
from rocketspark.message.batches.columns import decompress_bodies
from rocketspark.message.batches.schema import SPARK_SCHEMA, SPARK_TIMESTAMP, STORED_SCHEMA
from rocketspark.message.properties.columns import properties_to_map


def to_spark_batch(stored: pa.RecordBatch, broker_name: str) -> pa.RecordBatch:
    """A STORED_SCHEMA batch as the Spark source yields it (SPARK_SCHEMA).

    Bodies are decompressed here: SPARK_SCHEMA has no sys flag, so a compressed body could not be
    told apart downstream.
    """
    require_schema(stored, STORED_SCHEMA, "STORED_SCHEMA")
    bodies, _ = decompress_bodies(stored.column("body"), stored.column("sys_flag").to_numpy())
    columns = {
        "topic": stored.column("topic"),
        "brokerName": pa.repeat(pa.scalar(broker_name, pa.string()), stored.num_rows),
        "queueId": stored.column("queue_id"),
        "queueOffset": stored.column("queue_offset"),
        "msgId": stored.column("msg_id"),
        "tags": stored.column("tags"),
        "keys": stored.column("keys"),
        "body": bodies,
        "bornTimestamp": pc.multiply_checked(stored.column("born_timestamp"), 1000).cast(SPARK_TIMESTAMP),
        "storeTimestamp": pc.multiply_checked(stored.column("store_timestamp"), 1000).cast(SPARK_TIMESTAMP),
        "bornHost": stored.column("born_host"),
        "reconsumeTimes": stored.column("reconsume_times"),
        "properties": properties_to_map(stored.column("properties")),
    }
    return pa.RecordBatch.from_arrays([columns[name] for name in SPARK_SCHEMA.names], schema=SPARK_SCHEMA)
