"""Spark finds this module by its `pyspark_` prefix and registers `DefaultSource` as format "rocketmq":

    spark.readStream.format("rocketmq").option("nameserver", "127.0.0.1:9876")...

no `spark.dataSource.register(...)` call needed.
"""

from rocketspark.spark.datasource import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
