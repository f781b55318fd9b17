"""The bundled RocketMQ broker: Arrow-encoded commit log, consume queues, send, pull, offsets."""
