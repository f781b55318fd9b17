"""Messages: the Python types (`message`), ids, tag filters, name and body validation, and three
sub-packages: `records` (RocketMQ's binary message records), `batches` (Arrow batches of
messages and their one schema definition) and `properties` (the properties string and its columns).

Everything that produces, stores, transfers or reads messages imports it from here.
`MessageQueue` lives in `rocketspark.protocol.queue`: bodies and headers name queues, and the
protocol imports nothing from here.
"""
