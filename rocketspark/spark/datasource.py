"""`RocketMQDataSource`: the `rocketmq` format of Spark's Python data source API.

Kept light: Spark imports it in every Python worker that looks data sources up, so the readers and
writers (and pyarrow, and the client) load only when a query uses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from rocketspark.errors import ConfigError

if TYPE_CHECKING:
    from rocketspark.spark.sink.options import SinkOptions
    from rocketspark.spark.sink.transactional.writers import TransactionalBatchWriter, TransactionalStreamWriter
    from rocketspark.spark.sink.writers import RocketMQBatchWriter, RocketMQStreamWriter
    from rocketspark.spark.source.batch_reader import RocketMQBatchReader
    from rocketspark.spark.source.stream_reader import RocketMQStreamReader


class RocketMQDataSource(DataSource):
    """Read RocketMQ topics as a stream (`spark.readStream`) or a bounded DataFrame (`spark.read`);
    write rows to topics (`df.writeStream`, `df.write`).

    Options are described in docs/spark.md; the read schema is fixed (see :meth:`schema`).
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
        from rocketspark.spark.options import parse  # noqa: PLC0415
        from rocketspark.spark.source.batch_reader import batch_reader  # noqa: PLC0415

        self._check_schema(schema)
        return batch_reader(parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> RocketMQStreamReader:
        """With streaming admission control where PySpark has it (4.2 and newer)."""
        from rocketspark.spark import versions  # noqa: PLC0415
        from rocketspark.spark.options import parse  # noqa: PLC0415

        self._check_schema(schema)
        options = parse(self.options, streaming=True)
        if versions.has(versions.ADMISSION_CONTROL):
            from rocketspark.spark.source.admission import AdmissionStreamReader  # noqa: PLC0415

            return AdmissionStreamReader(options)
        from rocketspark.spark.source.stream_reader import RocketMQStreamReader  # noqa: PLC0415

        return RocketMQStreamReader(options)

    def _sink_options(self, schema: StructType, overwrite: bool) -> SinkOptions:
        """Checked on the driver before any task starts: options, columns, save mode, topic."""
        from rocketspark.spark.sink.options import check_input, parse_sink  # noqa: PLC0415
        from rocketspark.spark.sink.transactional import listener  # noqa: PLC0415
        from rocketspark.spark.sink.writing import check_topic  # noqa: PLC0415

        options = parse_sink(self.options)
        if overwrite:
            raise ConfigError(
                'format rocketmq appends messages to topics and cannot replace them: use .mode("append") '
                "(overwrite is not supported)"
            )
        check_input(schema, options)
        # a transactional write asks through its transaction producer: a plain producer of the group
        # would be a member the brokers' checks could reach and it could not answer
        check_topic(options, listener.producer_for(options) if options.transactional else None)
        return options

    def writer(self, schema: StructType, overwrite: bool) -> RocketMQBatchWriter | TransactionalBatchWriter:
        from rocketspark.spark.sink.transactional.writers import TransactionalBatchWriter  # noqa: PLC0415
        from rocketspark.spark.sink.writers import RocketMQBatchWriter  # noqa: PLC0415

        options = self._sink_options(schema, overwrite)
        return TransactionalBatchWriter(options) if options.transactional else RocketMQBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> RocketMQStreamWriter | TransactionalStreamWriter:
        from rocketspark.spark.sink.transactional.writers import TransactionalStreamWriter  # noqa: PLC0415
        from rocketspark.spark.sink.writers import RocketMQStreamWriter  # noqa: PLC0415

        options = self._sink_options(schema, overwrite)
        return TransactionalStreamWriter(options) if options.transactional else RocketMQStreamWriter(options)
