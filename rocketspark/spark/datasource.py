"""`RocketMQDataSource`: the `rocketmq` format of Spark's Python data source API.

Kept light: Spark imports it in every Python worker that looks data sources up, so the readers
(and pyarrow, and the client) load only when a query uses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from rocketspark.errors import ConfigError

if TYPE_CHECKING:
    from rocketspark.spark.batch_reader import RocketMQBatchReader
    from rocketspark.spark.stream_reader import RocketMQStreamReader


class RocketMQDataSource(DataSource):
    """Read RocketMQ topics as a stream (`spark.readStream`) or a bounded DataFrame (`spark.read`).

    Options are described in docs/spark.md; the schema is fixed (see :meth:`schema`).
    """

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        from rocketspark.spark.schema import SOURCE_SCHEMA  # noqa: PLC0415 - lazy, see the module docstring

        return SOURCE_SCHEMA

    def _check_schema(self, schema: StructType) -> None:
        expected = self.schema()
        if schema != expected:
            raise ConfigError(
                f"the rocketmq source has a fixed schema ({expected.simpleString()}); do not pass .schema(...)"
            )

    def reader(self, schema: StructType) -> RocketMQBatchReader:
        from rocketspark.spark.batch_reader import RocketMQBatchReader  # noqa: PLC0415
        from rocketspark.spark.options import parse  # noqa: PLC0415

        self._check_schema(schema)
        return RocketMQBatchReader(parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> RocketMQStreamReader:
        from rocketspark.spark.options import parse  # noqa: PLC0415
        from rocketspark.spark.stream_reader import RocketMQStreamReader  # noqa: PLC0415

        self._check_schema(schema)
        return RocketMQStreamReader(parse(self.options, streaming=True))
