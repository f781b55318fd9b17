"""The RocketMQ client: ClientInstance, Producer, LitePullConsumer, PushConsumer, allocation, offset stores."""
