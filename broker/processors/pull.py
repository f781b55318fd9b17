"""PULL_MESSAGE (11) with long polling, and the Arrow pull, which differs only in its body.

Answers follow RocketMQ's PullMessageProcessor: the four response header fields are sent with
every status; an empty pull with the suspend bit is held until a matching message arrives or the
hold time passes, then answered with whatever the queue has (PULL_NOT_FOUND at the deadline).
"""

from __future__ import annotations

import enum
import logging
from typing import Protocol

from broker.context import (
    HasAddress,
    HasConfig,
    HasConsumerOffsets,
    HasConsumers,
    HasHold,
    HasStats,
    HasStore,
    HasSubscriptionGroups,
    HasTopics,
)
from broker.store.results import GetResult, GetStatus
from rocketspark.errors import ValidationError
from rocketspark.message.batches.ipc import ipc_stream
from rocketspark.message.batches.schema import STORED_SCHEMA
from rocketspark.message.filter import build_subscription, filter_codes
from rocketspark.message.validation import validate_group
from rocketspark.protocol.body.heartbeat import SubscriptionData
from rocketspark.protocol.body.topic import Perm
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.pull import PullMessageRequestHeader, PullMessageResponseHeader
from rocketspark.remoting.connection import Connection, HandlerResult
from rocketspark.remoting.processor import ProcessorTable

log = logging.getLogger(__name__)


class PullContext(
    HasConfig,
    HasAddress,
    HasTopics,
    HasSubscriptionGroups,
    HasConsumerOffsets,
    HasConsumers,
    HasStore,
    HasStats,
    HasHold,
    Protocol,
):
    """What PullMessageProcessor reads of the broker."""


_STATUS_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


class Encoding(enum.Enum):
    STANDARD = "standard"  # RocketMQ's binary records
    ARROW = "arrow"  # an Arrow IPC stream of STORED_SCHEMA batches


#: bytes an answer adds to each body, besides it: a record's fixed fields, topic and properties,
#: or a stored row's other columns. Counted against the byte limit so answers fit in a frame.
MESSAGE_OVERHEAD = {Encoding.STANDARD: 160, Encoding.ARROW: 240}
#: room a pull answer's frame keeps for its header: the rest of the frame cap is for the body
ANSWER_HEADER_ROOM = 64 * 1024


def response_code(result: GetResult, requested_offset: int) -> ResponseCode:
    code = _STATUS_CODES.get(result.status)
    if code is not None:
        return code
    # NO_MESSAGE_IN_QUEUE, NO_MATCHED_LOGIC_QUEUE
    return ResponseCode.PULL_OFFSET_MOVED if requested_offset != 0 else ResponseCode.PULL_NOT_FOUND


class PullMessageProcessor:
    def __init__(self, broker: PullContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.PULL_MESSAGE, self.pull_standard)
        if self.broker.config.arrow_enable:
            table.register(ExtensionCode.ARROW_PULL_MESSAGE, self.pull_arrow)

    def pull_standard(self, connection: Connection, request: RemotingCommand) -> HandlerResult:
        return self._pull(request, Encoding.STANDARD)

    def pull_arrow(self, connection: Connection, request: RemotingCommand) -> HandlerResult:
        return self._pull(request, Encoding.ARROW)

    def _pull(self, request: RemotingCommand, encoding: Encoding) -> HandlerResult:
        """Check the pull and apply its commit offset now, as the frame is read; serve it in a task.

        The commit must not wait for the task: a consumer's last pull and the offset update it sends
        at shutdown often arrive in one read, and the update (applied at once) must stay the later."""
        header = request.decode_header(PullMessageRequestHeader)
        refusal = self._check(request, header)
        if refusal is not None:
            return refusal
        try:
            codes = filter_codes(self._subscription(header))
        except ValidationError as exc:
            code = exc.code if exc.code is not None else ResponseCode.SYSTEM_ERROR
            return request.response(code, str(exc), PullMessageResponseHeader(0, header.queue_offset, 0, 0))
        if header.commits_offset:
            self.broker.consumer_offsets.commit(
                header.consumer_group, header.topic, header.queue_id, header.commit_offset
            )
        return self._serve(request, header, codes, encoding)

    async def _serve(
        self,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        codes: frozenset[int] | None,
        encoding: Encoding,
    ) -> RemotingCommand:
        broker = self.broker
        config = broker.config
        if encoding is Encoding.ARROW:
            max_messages = min(header.max_msg_nums, config.arrow_pull_max_messages)
            max_bytes = min(header.max_msg_bytes or config.arrow_pull_max_bytes, config.arrow_pull_max_bytes)
        else:
            max_messages = min(header.max_msg_nums, config.max_transfer_count_on_message_in_memory)
            max_bytes = min(
                header.max_msg_bytes or config.max_transfer_bytes_on_message_in_memory,
                config.max_transfer_bytes_on_message_in_memory,
            )

        async def fetch() -> GetResult:
            return await broker.store.get_messages(
                header.topic,
                header.queue_id,
                header.queue_offset,
                max_messages=max_messages,
                max_bytes=max_bytes,
                tag_codes_filter=codes,
                message_overhead=MESSAGE_OVERHEAD[encoding],
            )

        result = await fetch()
        code = response_code(result, header.queue_offset)
        if code == ResponseCode.PULL_NOT_FOUND and header.suspend:
            hold_ms = header.suspend_timeout_millis if config.long_polling_enable else config.short_polling_time_mills
            await broker.hold.hold(header.topic, header.queue_id, header.queue_offset, codes, hold_ms / 1000)
            result = await fetch()
            code = response_code(result, header.queue_offset)
        body: memoryview | None = None
        if code == ResponseCode.SUCCESS:
            body = self._encode(result, encoding)
            while len(body) > config.frame_max_length - ANSWER_HEADER_ROOM and result.message_count > 1:
                # the overhead estimate was short (large properties): answer with fewer messages
                max_messages = result.message_count // 2
                result = await fetch()
                body = self._encode(result, encoding)
            self._count(result, encoding)
        elif code == ResponseCode.PULL_OFFSET_MOVED:
            log.info(
                "offset %d of %s:%d moved for group %s; next %d (min %d, max %d)",
                header.queue_offset,
                header.topic,
                header.queue_id,
                header.consumer_group,
                result.next_begin_offset,
                result.min_offset,
                result.max_offset,
            )
        return request.response(
            code,
            header=PullMessageResponseHeader(0, result.next_begin_offset, result.min_offset, result.max_offset),
            body_view=body,
        )

    def _encode(self, result: GetResult, encoding: Encoding) -> memoryview:
        if encoding is Encoding.ARROW:
            return ipc_stream(STORED_SCHEMA, result.batches())
        return memoryview(result.records(self.broker.address))

    def _count(self, result: GetResult, encoding: Encoding) -> None:
        stats = self.broker.stats
        if encoding is Encoding.ARROW:
            stats.arrow_pull_requests += 1
            stats.arrow_pull_messages += result.message_count
        else:
            stats.standard_pull_requests += 1
            stats.standard_pull_messages += result.message_count

    def _check(self, request: RemotingCommand, header: PullMessageRequestHeader) -> RemotingCommand | None:
        broker = self.broker
        no_messages = PullMessageResponseHeader(0, header.queue_offset, 0, 0)
        try:
            validate_group(header.consumer_group)  # before find() creates it (and its retry topic)
        except ValidationError as exc:
            return request.response(ResponseCode.INVALID_PARAMETER, f"consumerGroup: {exc}", no_messages)
        group = broker.subscription_groups.find(header.consumer_group)
        if group is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{header.consumer_group}] does not exist",
                header=no_messages,
            )
        if not group.consume_enable:
            return request.response(
                ResponseCode.NO_PERMISSION, f"subscription group [{header.consumer_group}] may not consume", no_messages
            )
        topic = broker.topics.get(header.topic)
        if topic is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{header.topic}] not exist on broker {broker.config.broker_name}, apply first please!",
                header=no_messages,
            )
        if not topic.perm & Perm.READ:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{header.topic}] pulling message is forbidden", no_messages
            )
        if not 0 <= header.queue_id < topic.read_queue_nums:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                f"topicConfig.readQueueNums:[{topic.read_queue_nums}] consumer:[{header.consumer_group}]",
                header=no_messages,
            )
        return None

    def _subscription(self, header: PullMessageRequestHeader) -> SubscriptionData:
        if header.has_subscription:
            return build_subscription(header.topic, header.subscription, header.expression_type)
        subscription = self.broker.consumers.subscription(header.consumer_group, header.topic)
        if subscription is None:
            known = header.consumer_group in self.broker.consumers.groups
            raise ValidationError(
                "the consumer's subscription not exist" if known else "the consumer's group info not exist",
                code=ResponseCode.SUBSCRIPTION_NOT_EXIST,
            )
        if subscription.sub_version < header.sub_version:
            raise ValidationError("the consumer's subscription not latest", code=ResponseCode.SUBSCRIPTION_NOT_LATEST)
        if subscription.expression_type.upper() != "TAG":
            raise ValidationError(
                f"The broker does not support consumer to filter message by {subscription.expression_type}",
                code=ResponseCode.SYSTEM_ERROR,
            )
        return subscription
