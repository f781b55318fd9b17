"""The source's fixed Spark schema, derived from the one Arrow definition of a message batch."""

from __future__ import annotations

from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from rocketspark.message.batches.schema import SPARK_SCHEMA

#: what `spark.read(Stream).format("rocketmq")` yields; Spark's Arrow conversion of it is SPARK_SCHEMA
SOURCE_SCHEMA: StructType = from_arrow_schema(SPARK_SCHEMA)
