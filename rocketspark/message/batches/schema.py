"""The Arrow schemas of message batches. This module is their one definition.

Three shapes of the same messages, each documented in docs/architecture.md:

* :data:`STORED_SCHEMA`: a batch as the broker keeps it in its commit log, and as an Arrow pull
  returns it. Everything a standard pull needs to write RocketMQ's binary records is a column, so a
  pull never parses properties; times are RocketMQ's milliseconds.
* :data:`PRODUCER_SCHEMA`: a batch as a producer sends it with the Arrow send. The broker adds
  queue ids, offsets, store times and ids.
* :data:`SPARK_SCHEMA`: a batch as the Spark source yields it, with types and nullability exactly as
  Spark's Arrow conversion of the source's schema produces them (timestamps in microseconds, UTC;
  properties as a map). Only what RocketMQ can leave empty is nullable: tags and keys.
"""

from __future__ import annotations

import pyarrow as pa


def _map_of_strings() -> pa.DataType:
    return pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string(), nullable=False))


STORED_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("queue_id", pa.int32(), nullable=False),
        pa.field("queue_offset", pa.int64(), nullable=False),
        # physical offset of the message: position of its stored batch + its row in the batch
        pa.field("commit_log_offset", pa.int64(), nullable=False),
        # UNIQ_KEY when the producer set one, else the offset msgId (what Java's getMsgId returns)
        pa.field("msg_id", pa.string(), nullable=False),
        pa.field("tags", pa.string(), nullable=True),
        pa.field("keys", pa.string(), nullable=True),
        pa.field("body", pa.binary(), nullable=False),  # compressed when sys_flag says so
        pa.field("flag", pa.int32(), nullable=False),
        pa.field("sys_flag", pa.int32(), nullable=False),
        pa.field("born_timestamp", pa.int64(), nullable=False),
        pa.field("born_host", pa.string(), nullable=False),  # "ip:port"
        pa.field("store_timestamp", pa.int64(), nullable=False),
        pa.field("reconsume_times", pa.int32(), nullable=False),
        # every property, system ones (TAGS, KEYS, UNIQ_KEY, WAIT, ...) included, in RocketMQ's string form
        pa.field("properties", pa.string(), nullable=False),
    ]
)

PRODUCER_SCHEMA = pa.schema(
    [
        pa.field("body", pa.binary(), nullable=False),
        pa.field("tags", pa.string(), nullable=True),
        pa.field("keys", pa.string(), nullable=True),
        pa.field("uniq_key", pa.string(), nullable=True),
        pa.field("properties", _map_of_strings(), nullable=True),  # user properties only
    ]
)

SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")

SPARK_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("brokerName", pa.string(), nullable=False),
        pa.field("queueId", pa.int32(), nullable=False),
        pa.field("queueOffset", pa.int64(), nullable=False),
        pa.field("msgId", pa.string(), nullable=False),
        pa.field("tags", pa.string(), nullable=True),
        pa.field("keys", pa.string(), nullable=True),
        pa.field("body", pa.binary(), nullable=False),
        pa.field("bornTimestamp", SPARK_TIMESTAMP, nullable=False),
        pa.field("storeTimestamp", SPARK_TIMESTAMP, nullable=False),
        pa.field("bornHost", pa.string(), nullable=False),
        pa.field("reconsumeTimes", pa.int32(), nullable=False),
        pa.field("properties", _map_of_strings(), nullable=False),
    ]
)
