"""Arrow batches of messages: the one schema definition, the conversions between the producer,
stored and Spark shapes, and the column helpers they share."""
