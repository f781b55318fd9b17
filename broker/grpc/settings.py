"""The settings the broker answers on a client's Telemetry stream (what Apache's proxy imposes).

A client opens its stream with its own settings; the answer is those settings with the server's
values merged in. Producers: `publishing.max_body_size` (maxMessageSize), `validate_message_type` and
an exponential backoff of their send retries (3 attempts, 10 ms doubling up to 1 s: the proxy's
defaults). Consumers: `subscription.fifo` (the group's consumeMessageOrderly), `receive_batch_size`
(32), `long_polling_timeout` (grpcClientConsumerMaxLongPollingTimeoutMillis, 20 s) and a customized
backoff: the broker's messageDelayLevel from level 3 on, the delays a 4.x consumer's retries wait (10s
30s 1m ... by default), with `max_attempts` = the group's retryMaxTimes + 1. The Python client uses
`max_body_size` and `long_polling_timeout` as given and the Node.js client waits for this answer, so
neither is ever 0.
"""

from __future__ import annotations

from typing import Protocol

from broker.context import HasConfig, HasDelayLevels, HasStoreConfig, HasSubscriptionGroups, HasTopics
from broker.grpc.call import Call
from broker.grpc.messages import duration
from broker.grpc.status import StatusError
from broker.grpc.v2 import definition_pb2 as pb
from broker.retry import subscription_group
from rocketspark.message.validation import FIRST_RETRY_DELAY_LEVEL

PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1_000
PRODUCER_BACKOFF_MULTIPLIER = 2.0
RECEIVE_BATCH_SIZE = 32
CONSUMER_TYPES = (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER)


class SettingsContext(HasConfig, HasStoreConfig, HasTopics, HasSubscriptionGroups, HasDelayLevels, Protocol):
    """What the settings answers read of the broker."""


def answer(broker: SettingsContext, sent: pb.Settings, call: Call) -> pb.Settings:
    """The settings to answer a client that sent `sent` (UNRECOGNIZED_CLIENT_TYPE for others than
    producers, push and simple consumers)."""
    settings = pb.Settings()
    settings.CopyFrom(sent)
    settings.metric.on = False
    if sent.client_type == pb.PRODUCER:
        settings.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=PRODUCER_MAX_ATTEMPTS,
                exponential_backoff=pb.ExponentialBackoff(
                    initial=duration(PRODUCER_BACKOFF_INITIAL_MS),
                    max=duration(PRODUCER_BACKOFF_MAX_MS),
                    multiplier=PRODUCER_BACKOFF_MULTIPLIER,
                ),
            )
        )
        settings.publishing.max_body_size = broker.store_config.max_message_size
        settings.publishing.validate_message_type = True
        return settings
    if sent.client_type not in CONSUMER_TYPES:
        name = pb.ClientType.Name(sent.client_type) if sent.client_type in pb.ClientType.values() else "unknown"
        raise StatusError(
            pb.UNRECOGNIZED_CLIENT_TYPE,
            f"client type {name} is not served: this broker serves producers, push and simple consumers",
        )
    group = call.group(sent.subscription.group)
    config = subscription_group(broker, group)
    subscription = settings.subscription
    subscription.fifo = config.consume_message_orderly
    subscription.receive_batch_size = RECEIVE_BATCH_SIZE
    subscription.long_polling_timeout.CopyFrom(
        duration(broker.config.grpc_client_consumer_max_long_polling_timeout_millis)
    )
    delays = broker.delay_levels.delays_ms[FIRST_RETRY_DELAY_LEVEL - 1 :] or broker.delay_levels.delays_ms[-1:]
    settings.backoff_policy.CopyFrom(
        pb.RetryPolicy(
            max_attempts=config.retry_max_times + 1,
            customized_backoff=pb.CustomizedBackoff(next=[duration(ms) for ms in delays]),
        )
    )
    return settings
