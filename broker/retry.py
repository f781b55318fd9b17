"""Retries and dead letters: where a message its consumer failed goes next.

The decisions of Apache RocketMQ's SendMessageProcessor (consumerSendMsgBack for CONSUMER_SEND_MSG_BACK,
handleRetryAndDLQ for a client's own send to a %RETRY% topic): a message whose reconsume times reached
the limit (the request's maxReconsumeTimes, else the group's retryMaxTimes) goes to the group's
%DLQ% topic, which has one queue; otherwise to a random queue of its %RETRY% topic, delayed. Both
topics are created readable and writable when missing.
"""

from __future__ import annotations

import random
from typing import Protocol

from broker.context import HasSubscriptionGroups, HasTopics
from broker.managers.subscription_group_manager import SubscriptionGroupConfig
from rocketspark.errors import ValidationError
from rocketspark.message.validation import dlq_topic, retry_topic
from rocketspark.protocol.codes import ResponseCode

DLQ_QUEUE_NUMS = 1


class RetryContext(HasTopics, HasSubscriptionGroups, Protocol):
    """What the retry decisions read of the broker."""


def subscription_group(broker: RetryContext, group: str) -> SubscriptionGroupConfig:
    """The group's config (auto-created when the broker allows it), or SUBSCRIPTION_GROUP_NOT_EXIST."""
    config = broker.subscription_groups.find(group)
    if config is None:
        raise ValidationError(
            f"subscription group not exist, {group}: create it first (autoCreateSubscriptionGroup=false)",
            code=ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
        )
    return config


def exhausted(config: SubscriptionGroupConfig, reconsume_times: int, max_reconsume_times: int | None) -> bool:
    """Whether a message consumed `reconsume_times` times already belongs in the dead-letter topic."""
    limit = config.retry_max_times if max_reconsume_times is None else max_reconsume_times
    return reconsume_times >= limit


def dead_letter_queue(broker: RetryContext, group: str) -> tuple[str, int]:
    topic = dlq_topic(group)
    broker.topics.create_internal_topic(topic, DLQ_QUEUE_NUMS)
    return topic, 0


def retry_queue(broker: RetryContext, group: str, config: SubscriptionGroupConfig) -> tuple[str, int]:
    """A random queue of the group's retry topic."""
    topic = retry_topic(group)
    topic_config = broker.topics.create_internal_topic(topic, config.retry_queue_nums)
    return topic, random.randrange(max(1, topic_config.write_queue_nums))
