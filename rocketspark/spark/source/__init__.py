"""The source: `spark.readStream.format("rocketmq")` and `spark.read.format("rocketmq")`.

As Spark's Kafka connector splits its source: the readers Spark calls (`stream_reader`,
`batch_reader`); what the driver asks the brokers, reading only (`queue_view`, `positions`,
`offsets`); the pure planning of a batch and its partitions (`planning`, `splitting`,
`trigger_limits`, `pushdown`); the executors' reads (`reading`); and the mirror of a stream's
progress into its consumer group (`offset_mirror`), a write kept apart from planning.
"""
