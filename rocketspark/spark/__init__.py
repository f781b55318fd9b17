"""The Spark connector: `spark.readStream.format("rocketmq")` and `spark.read.format("rocketmq")`.

It needs PySpark (`pip install 'rocketspark[spark]'`, or the PySpark a platform ships): importing it
without one raises MissingExtraError, a ModuleNotFoundError that names that command.
"""

from rocketspark.extras import require_pyspark

require_pyspark("the Spark connector (rocketspark.spark)")
