"""Retries and dead letters: where a message its consumer failed goes next.

The decisions of Apache RocketMQ's SendMessageProcessor (consumerSendMsgBack for CONSUMER_SEND_MSG_BACK,
handleRetryAndDLQ for a client's own send to a %RETRY% topic): a message whose reconsume times reached
the limit (the request's maxReconsumeTimes, else the group's retryMaxTimes) goes to the group's
%DLQ% topic, which has one queue; otherwise to a random queue of its %RETRY% topic, delayed. Both
topics are created readable and writable when missing.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Protocol

from broker.context import HasSubscriptionGroups, HasTopics
from broker.managers.subscription_group_manager import SubscriptionGroupConfig
from broker.store.writer.append_requests import StandardMessage
from rocketspark.errors import ValidationError
from rocketspark.message.ids import offset_msg_id
from rocketspark.message.properties import codec as props
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


def consumed_again(row: Mapping[str, Any], broker_address: str, reconsume_times: int) -> StandardMessage:
    """A stored message (a STORED_SCHEMA row) its consumer failed, as it is stored again in a retry
    or dead-letter topic: with RETRY_TOPIC (its first topic), ORIGIN_MESSAGE_ID (its first offset
    msgId) and `reconsume_times` (also in RECONSUME_TIME)."""
    properties = props.decode_properties(row["properties"])
    changes: dict[str, str | None] = {
        props.RETRY_TOPIC: properties.get(props.RETRY_TOPIC) or row["topic"],
        props.ORIGIN_MESSAGE_ID: properties.get(props.ORIGIN_MESSAGE_ID)
        or offset_msg_id(broker_address, row["commit_log_offset"]),
        props.RECONSUME_TIME: str(reconsume_times),
        props.WAIT_STORE_MSG_OK: "false",
    }
    return StandardMessage.from_stored(row, reconsume_times=reconsume_times).with_properties(changes)


def dead_letter_queue(broker: RetryContext, group: str) -> tuple[str, int]:
    topic = dlq_topic(group)
    broker.topics.create_internal_topic(topic, DLQ_QUEUE_NUMS)
    return topic, 0


def retry_queue(broker: RetryContext, group: str, config: SubscriptionGroupConfig) -> tuple[str, int]:
    """A random queue of the group's retry topic."""
    topic = retry_topic(group)
    topic_config = broker.topics.create_internal_topic(topic, config.retry_queue_nums)
    return topic, random.randrange(max(1, topic_config.write_queue_nums))
