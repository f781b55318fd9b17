"""The Spark connector: `spark.readStream.format("rocketmq")` and `spark.read.format("rocketmq")`."""
