"""CONSUMER_SEND_MSG_BACK (36): a consumer failed a message; store it again for the group to retry.

As Apache RocketMQ's SendMessageProcessor.consumerSendMsgBack: the message at the request's commit
log offset is stored again in a random queue of %RETRY%<group>, delayed by the requested level or,
for level 0, by level 3 + the times it was consumed, with RETRY_TOPIC (its first topic),
ORIGIN_MESSAGE_ID (its first offset msgId) and its reconsume times raised by one (also in
RECONSUME_TIME). Under ACL the signing account needs SUB on the message's own topic (as
VIEW_MESSAGE_BY_ID), not only on its group: else any offset would copy any message into a topic
the group may pull. Once its reconsume times reach the limit (the request's maxReconsumeTimes, else the
group's retryMaxTimes), or when the requested level is negative, it goes to %DLQ%<group> instead.
"""

from __future__ import annotations

from typing import Protocol

from broker.acl.guard import late_refusal
from broker.acl.permission import Perm
from broker.acl.resources import Needs, on_topic
from broker.context import HasAddress, HasDelayLevels, HasStore
from broker.retry import RetryContext, consumed_again, dead_letter_queue, exhausted, retry_queue, subscription_group
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import FIRST_RETRY_DELAY_LEVEL, validate_group
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.send import ConsumerSendMsgBackRequestHeader
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable


class SendBackContext(RetryContext, HasStore, HasAddress, HasDelayLevels, Protocol):
    """What SendBackProcessor reads of the broker."""


class SendBackProcessor:
    def __init__(self, broker: SendBackContext) -> None:
        self.broker = broker
        self._table = ProcessorTable()

    def register(self, table: ProcessorTable) -> None:
        self._table = table
        table.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)

    async def send_back(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(ConsumerSendMsgBackRequestHeader)
        validate_group(header.group)
        broker = self.broker
        config = subscription_group(broker, header.group)
        if config.retry_queue_nums <= 0:  # the group wants no retries: the message is dropped, as in Java
            return request.response()
        row = await broker.store.message_at(header.offset)
        if row is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}")
        refusal = late_refusal(self._table, connection, request, Needs((on_topic(str(row["topic"]), Perm.SUB),)))
        if refusal is not None:
            return request.response(ResponseCode.NO_PERMISSION, refusal)
        reconsume_times = row["reconsume_times"]
        message = consumed_again(row, broker.address, reconsume_times + 1)
        if header.delay_level < 0 or exhausted(config, reconsume_times, header.max_reconsume_times):
            topic, queue_id = dead_letter_queue(broker, header.group)
            message = message.with_properties({props.DELAY_TIME_LEVEL: None})
        else:
            topic, queue_id = retry_queue(broker, header.group, config)
            level = header.delay_level or FIRST_RETRY_DELAY_LEVEL + reconsume_times
            topic, queue_id, message = broker.delay_levels.schedule(topic, queue_id, message, level)
        await broker.store.put_messages(topic, queue_id, [message], wait_flush=False)
        return request.response()
