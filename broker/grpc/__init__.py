"""The RocketMQ 5.x endpoint: `apache.rocketmq.v2.MessagingService` over gRPC, as Apache's proxy in
"local" mode serves it, on the same topics, groups and offsets as the 4.x port (docs/protocol.md)."""
