"""The bundled RocketMQ name server: route tables, broker liveness and KV config."""
