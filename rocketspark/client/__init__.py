"""The RocketMQ client: ClientInstance, Producer, LitePullConsumer, allocation, offset stores."""
