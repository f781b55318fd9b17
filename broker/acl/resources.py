"""What each request code needs: the topics and groups it touches and the permission on each, or `admin`.

The table reads topics and groups with the processors' own header and body classes. Codes after
Apache RocketMQ 4.9's PlainAccessValidator.parse; where 4.9 checks nothing (the batch send, offset
queries, locks) this table asks what the request's topic and group make sense of, and a code the
table does not list needs `admin`, so a processor added later is closed until its rule is written.
A `%RETRY%<group>` topic is the group's resource, needing SUB on the group, as Apache's.
END_TRANSACTION needs PUB on the half message's real topic, which only its processor reads: the rule
asks PUB on the topic the header names (5.x clients send it), and the processor asks the rest with
`end_transaction_needs` through broker.acl.guard.late_refusal; END_TRANSACTION_RANGE's processor asks it
for the real topic of every half message of the range it ends.
CHECK_TRANSACTION_STATE goes from the broker to a producer, never to the broker: it has no rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from broker.acl.permission import Perm
from rocketspark.message.validation import group_of_retry_topic
from rocketspark.protocol.body.consumer import LockBatchRequestBody
from rocketspark.protocol.body.heartbeat import HeartbeatData
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.admin import (
    GetConsumeStatsRequestHeader,
    QueryMessageRequestHeader,
    TopicRequestHeader,
)
from rocketspark.protocol.headers.client import ConsumerGroupRequestHeader, UnregisterClientRequestHeader
from rocketspark.protocol.headers.offset import (
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rocketspark.protocol.headers.pull import PullMessageRequestHeader
from rocketspark.protocol.headers.queue_bytes import QueueBodyBytesRequestHeader
from rocketspark.protocol.headers.send import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    decode_send_header,
)
from rocketspark.protocol.headers.transaction import EndTransactionRequestHeader


@dataclass(frozen=True, slots=True)
class Need:
    kind: Literal["topic", "group"]
    name: str
    perm: Perm


@dataclass(frozen=True, slots=True)
class Needs:
    resources: tuple[Need, ...] = ()
    admin: bool = False


#: a rule: the needs of one request
Rule = Callable[[RemotingCommand], Needs]

AUTHENTICATED = Needs()  # a valid signature is enough
ADMIN = Needs(admin=True)


def on_topic(topic: str, perm: Perm) -> Need:
    """`perm` on `topic`; a retry topic is its group's, which needs SUB."""
    group = group_of_retry_topic(topic)
    return Need("group", group, Perm.SUB) if group is not None else Need("topic", topic, perm)


def on_group(group: str) -> Need:
    return Need("group", group, Perm.SUB)


def _standard_send(request: RemotingCommand) -> Needs:
    return Needs((on_topic(decode_send_header(request).topic, Perm.PUB),))


def _arrow_send(request: RemotingCommand) -> Needs:
    return Needs((on_topic(request.decode_header(SendMessageRequestHeader).topic, Perm.PUB),))


def _send_back(request: RemotingCommand) -> Needs:
    return Needs((on_group(request.decode_header(ConsumerSendMsgBackRequestHeader).group),))


def _end_transaction(request: RemotingCommand) -> Needs:
    topic = request.decode_header(EndTransactionRequestHeader).topic
    return Needs((on_topic(topic, Perm.PUB),)) if topic else AUTHENTICATED


def end_transaction_needs(half_real_topic: str) -> Needs:
    """What ending a half message needs: PUB on its real topic (its REAL_TOPIC property), for the
    processor to ask once it has read the half message."""
    return Needs((on_topic(half_real_topic, Perm.PUB),))


def _pull(request: RemotingCommand) -> Needs:
    header = request.decode_header(PullMessageRequestHeader)
    return Needs((on_topic(header.topic, Perm.SUB), on_group(header.consumer_group)))


def _query_consumer_offset(request: RemotingCommand) -> Needs:
    header = request.decode_header(QueryConsumerOffsetRequestHeader)
    return Needs((on_group(header.consumer_group), on_topic(header.topic, Perm.SUB)))


def _update_consumer_offset(request: RemotingCommand) -> Needs:
    header = request.decode_header(UpdateConsumerOffsetRequestHeader)
    return Needs((on_group(header.consumer_group), on_topic(header.topic, Perm.SUB)))


def _consumer_list(request: RemotingCommand) -> Needs:
    return Needs((on_group(request.decode_header(ConsumerGroupRequestHeader).consumer_group),))


def _heartbeat(request: RemotingCommand) -> Needs:
    """SUB on every consumer group and on every topic it subscribes; producer groups need nothing."""
    data = HeartbeatData.from_json(request.body)
    needs: list[Need] = []
    for consumer in data.consumer_data_set:
        needs.append(on_group(consumer.group_name))
        needs.extend(on_topic(s.topic, Perm.SUB) for s in consumer.subscription_data_set)
    return Needs(tuple(needs))


def _unregister(request: RemotingCommand) -> Needs:
    group = request.decode_header(UnregisterClientRequestHeader).consumer_group
    return Needs((on_group(group),)) if group else AUTHENTICATED


def _lock(request: RemotingCommand) -> Needs:
    return Needs((on_group(LockBatchRequestBody.from_json(request.body).consumer_group),))


def _topic_read(
    header_type: type[
        QueueRequestHeader | SearchOffsetRequestHeader | TopicRequestHeader | QueueBodyBytesRequestHeader
    ],
) -> Rule:
    return lambda request: Needs((on_topic(request.decode_header(header_type).topic, Perm.SUB),))


def _query_message(request: RemotingCommand) -> Needs:
    return Needs((on_topic(request.decode_header(QueryMessageRequestHeader).topic, Perm.SUB),))


def _consume_stats(request: RemotingCommand) -> Needs:
    header = request.decode_header(GetConsumeStatsRequestHeader)
    topic = (on_topic(header.topic, Perm.SUB),) if header.topic else ()
    return Needs((on_group(header.consumer_group), *topic))


RULES: dict[int, Rule] = {
    RequestCode.SEND_MESSAGE: _standard_send,
    RequestCode.SEND_MESSAGE_V2: _standard_send,
    RequestCode.SEND_BATCH_MESSAGE: _standard_send,
    ExtensionCode.ARROW_SEND_MESSAGE: _arrow_send,
    ExtensionCode.ARROW_SEND_HALF_MESSAGE: _arrow_send,
    RequestCode.CONSUMER_SEND_MSG_BACK: _send_back,
    RequestCode.PULL_MESSAGE: _pull,
    ExtensionCode.ARROW_PULL_MESSAGE: _pull,
    RequestCode.QUERY_CONSUMER_OFFSET: _query_consumer_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: _update_consumer_offset,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _consumer_list,
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.UNREGISTER_CLIENT: _unregister,
    RequestCode.LOCK_BATCH_MQ: _lock,
    RequestCode.UNLOCK_BATCH_MQ: _lock,
    RequestCode.GET_MAX_OFFSET: _topic_read(QueueRequestHeader),
    RequestCode.GET_MIN_OFFSET: _topic_read(QueueRequestHeader),
    RequestCode.GET_EARLIEST_MSG_STORETIME: _topic_read(QueueRequestHeader),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _topic_read(SearchOffsetRequestHeader),
    ExtensionCode.QUEUE_BODY_BYTES: _topic_read(QueueBodyBytesRequestHeader),
    RequestCode.GET_TOPIC_STATS_INFO: _topic_read(TopicRequestHeader),
    RequestCode.QUERY_MESSAGE: _query_message,
    RequestCode.GET_CONSUME_STATS: _consume_stats,
    RequestCode.VIEW_MESSAGE_BY_ID: lambda request: AUTHENTICATED,  # SUB on the message's topic: query_message.py
    RequestCode.END_TRANSACTION: _end_transaction,  # and end_transaction_needs, asked by the processor
    ExtensionCode.END_TRANSACTION_RANGE: lambda request: AUTHENTICATED,  # and end_transaction_needs, as above
    RequestCode.GET_ALL_TOPIC_CONFIG: lambda request: AUTHENTICATED,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: lambda request: AUTHENTICATED,  # names; offsets (43) need ADMIN
    RequestCode.GET_BROKER_RUNTIME_INFO: lambda request: AUTHENTICATED,
    RequestCode.UPDATE_AND_CREATE_TOPIC: lambda request: ADMIN,
    RequestCode.DELETE_TOPIC_IN_BROKER: lambda request: ADMIN,
    RequestCode.GET_BROKER_CONFIG: lambda request: ADMIN,
}


#: the codes whose rule reads the body: a refusal before the signature step does not parse it
READS_BODY = frozenset({RequestCode.HEART_BEAT, RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ})


def needs_of(request: RemotingCommand) -> Needs:
    """What `request` needs; a header or body that cannot be read raises as its processor would."""
    rule = RULES.get(request.code)
    return ADMIN if rule is None else rule(request)
