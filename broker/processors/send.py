"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) in the standard encodings.

A send to a %RETRY% topic (a consumer whose CONSUMER_SEND_MSG_BACK failed) whose reconsume times
reached the limit goes to the group's dead-letter topic (broker/retry.py); a delayed or timer
message is parked until due (broker/schedule/parking.py), a half message (TRAN_MSG "true") in
RMQ_SYS_TRANS_HALF_TOPIC until it is committed (broker/transaction/). Batches may not hold delayed,
timer or transactional messages, and a half message may not be a timer message.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Awaitable
from typing import Protocol

import numpy as np

from broker.context import (
    HasAddress,
    HasConfig,
    HasParking,
    HasStats,
    HasStore,
    HasStoreConfig,
    HasSubscriptionGroups,
    HasTopics,
)
from broker.managers.client_channel import ClientConnection
from broker.processors.send_batch import BATCH_REFUSAL, StandardBatch, read_standard_batch
from broker.retry import dead_letter_queue, exhausted, subscription_group
from broker.store.results import PutResult, PutStatus
from broker.store.writer.append_requests import StandardBatchFields, StandardMessage
from broker.transaction.half import half_message, is_half
from rocketspark.errors import ValidationError
from rocketspark.message import sysflag
from rocketspark.message.ids import offset_msg_id, offset_msg_ids
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import (
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    delay_level_of,
    group_of_retry_topic,
    validate_body,
    validate_encoded_properties,
    validate_group,
    validate_send_topic,
    validate_stored_int,
)
from rocketspark.protocol.body.topic import Perm, TopicConfig
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.send import SendMessageRequestHeader, SendMessageResponseHeader, decode_send_header
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable

log = logging.getLogger(__name__)

#: what the keys of timer messages' properties start with (TIMER_DELIVER_MS, TIMER_DELAY_SEC, ...)
_TIMER_KEYS = "TIMER_"


class SendContext(
    HasConfig,
    HasStoreConfig,
    HasAddress,
    HasTopics,
    HasSubscriptionGroups,
    HasParking,
    HasStore,
    HasStats,
    Protocol,
):
    """What SendMessageProcessor reads of the broker."""


class SendQueueContext(HasConfig, HasTopics, Protocol):
    """What :func:`resolve_send_queue` reads of the broker (the Arrow send uses it too)."""


def resolve_send_queue(
    broker: SendQueueContext, header: SendMessageRequestHeader, connection: ClientConnection
) -> tuple[TopicConfig, int]:
    """Check a send's header numbers and topic (creating it from TBW102 when allowed) and pick its queue.

    Raises ValidationError carrying the response code RocketMQ answers.
    """
    validate_send_topic(header.topic)
    validate_stored_int("bornTimestamp", header.born_timestamp, 64)
    validate_stored_int("sysFlag", header.sys_flag, 32)
    validate_stored_int("flag", header.flag, 32)
    validate_stored_int("reconsumeTimes", header.reconsume_times or 0, 32)
    group = group_of_retry_topic(header.topic)
    if group is not None:  # Java creates a missing retry topic with one queue
        validate_group(group)
        broker.topics.create_internal_topic(header.topic, 1)
    topic_config = broker.topics.create_in_send(header.topic, header.default_topic, header.default_topic_queue_nums)
    if not topic_config.perm & Perm.WRITE:
        raise ValidationError(
            f"the topic {header.topic} is not writable on broker {broker.config.broker_name}",
            code=ResponseCode.NO_PERMISSION,
        )
    queue_id = header.queue_id
    if queue_id < 0:
        queue_id = random.randrange(topic_config.write_queue_nums)
    if queue_id >= topic_config.write_queue_nums:
        raise ValidationError(
            f"request queueId[{queue_id}] is illegal: topic {header.topic} has {topic_config.write_queue_nums} "
            f"write queues (producer {connection.remote_address})",
            code=ResponseCode.SYSTEM_ERROR,
        )
    return topic_config, queue_id


def check_message(broker: SendContext, body: bytes, encoded: str, properties: dict[str, str], sys_flag: int) -> int:
    """Everything that could make storing the message fail, checked before it joins a group commit
    round; returns the message's delay level."""
    validate_body(body, broker.store_config.max_message_size)
    validate_encoded_properties(encoded)
    level = delay_level_of(properties)
    broker.parking.check(properties)
    if sysflag.transaction_type(sys_flag) == sysflag.TRANSACTION_PREPARED_TYPE and not is_half(properties):
        raise ValidationError(
            "a prepared (transactional) message must carry the property TRAN_MSG=true",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )
    if is_half(properties) and broker.parking.is_timer_message(properties):
        raise ValidationError(
            "a transactional (TRAN_MSG) message may not have a delivery time (TIMER_DELIVER_MS, TIMER_DELAY_SEC, "
            "TIMER_DELAY_MS)",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )
    return level


def send_response(broker: SendContext, request: RemotingCommand, result: PutResult) -> RemotingCommand:
    offsets = result.commit_log_offsets
    if len(offsets) == 1:
        msg_ids = offset_msg_id(broker.address, offsets[0])
    else:  # a batch: every message's msgId, comma-joined
        msg_ids = ",".join(offset_msg_ids(broker.address, np.asarray(offsets, dtype=np.int64)).to_pylist())
    code = ResponseCode.SUCCESS if result.status is PutStatus.PUT_OK else ResponseCode.FLUSH_DISK_TIMEOUT
    response = request.response(
        code, header=SendMessageResponseHeader(msg_ids, result.queue_id, result.first_queue_offset)
    )
    # Java clients read these two without a null check
    response.ext_fields[props.MSG_REGION] = broker.config.region_id
    response.ext_fields[props.TRACE_SWITCH] = "true" if broker.config.trace_on else "false"
    return response


class SendMessageProcessor:
    def __init__(self, broker: SendContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(
            (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE), self.process
        )

    def process(self, connection: Connection, request: RemotingCommand) -> Awaitable[RemotingCommand]:
        """Check and queue the send before returning (a refusal is raised at once), then answer when
        it is stored. Not a coroutine: an event loop may read many frames before it runs any task,
        and a send waiting for its first step would hold its body in memory unchecked."""
        header = decode_send_header(request)
        _, queue_id = resolve_send_queue(self.broker, header, connection)
        batch = request.code == RequestCode.SEND_BATCH_MESSAGE or bool(header.batch)
        if batch:
            taken = read_standard_batch(
                request.body,
                max_message_size=self.broker.store_config.max_message_size,
                sys_flag=header.sys_flag,
                timers=self.broker.parking.timers,
            )
            if not taken.forwarded and group_of_retry_topic(header.topic) is None:
                stored = self._put_batch(header, queue_id, taken, connection)
                return self._answer(request, self._stored(len(taken.columns), stored, None))
            raw = taken.columns.rows()  # the rare batch whose messages change on the way: one at a time
        else:
            raw = [(header.flag, request.body, header.properties or "")]
        return self._answer(
            request, self.store(header, queue_id, raw, batch=batch, born_host=connection.remote_address)
        )

    def store(
        self,
        header: SendMessageRequestHeader,
        queue_id: int,
        raw: list[tuple[int, bytes, str]],
        *,
        batch: bool,
        born_host: str,
    ) -> Awaitable[PutResult]:
        """Check the send's (flag, body, encoded properties) messages and queue them for the store
        (a refusal is raised at once); then the stored result, counted in the broker's stats. The
        5.x endpoint's SendMessage stores through here too."""
        messages = self._messages(header, raw, batch, born_host)
        topic, stored_queue_id, messages = self._destination(header, queue_id, messages)
        wait = all(m.wait_store_ok for m in messages)
        stored = self.broker.store.put_messages(topic, stored_queue_id, messages, wait_flush=wait)
        # a delayed, timer or half message is answered with the queue it was sent to, as Java does
        parked = topic in (SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC)
        return self._stored(len(messages), stored, queue_id if parked else None)

    def _put_batch(
        self, header: SendMessageRequestHeader, queue_id: int, taken: StandardBatch, connection: Connection
    ) -> Awaitable[PutResult]:
        """Store a checked batch as the producer batch it was taken apart into."""
        fields = StandardBatchFields(
            taken.columns.flags, header.sys_flag, header.reconsume_times or 0, taken.wait_store_ok
        )
        return self.broker.store.put_arrow(
            header.topic,
            queue_id,
            taken.batch,
            born_timestamp=header.born_timestamp,
            born_host=connection.remote_address,
            properties=taken.columns.properties,
            standard=fields,
        )

    def _destination(
        self, header: SendMessageRequestHeader, queue_id: int, messages: list[StandardMessage]
    ) -> tuple[str, int, list[StandardMessage]]:
        """Where the send's messages are stored: the group's dead-letter topic for a retry that reached
        its limit, RMQ_SYS_TRANS_HALF_TOPIC for a half message, where parking says for one message
        (a delayed or timer message waits until due), else the queue the send names."""
        topic = header.topic
        encoded = messages[0].properties
        if props.TRANSACTION_PREPARED in encoded and len(messages) == 1 and is_half(props.decode_properties(encoded)):
            topic, queue_id, half = half_message(topic, queue_id, messages[0])
            # as Apache's TransactionalMessageBridge: the half topic's config (readable, so the Spark
            # sink's driver reads its tasks' half messages back) is made with the first half message
            self.broker.topics.create_internal_topic(topic, 1)
            return topic, queue_id, [half]
        group = group_of_retry_topic(topic)
        if group is not None:
            config = subscription_group(self.broker, group)
            if exhausted(config, header.reconsume_times or 0, header.max_reconsume_times):
                topic, queue_id = dead_letter_queue(self.broker, group)
                return topic, queue_id, [m.with_properties({props.DELAY_TIME_LEVEL: None}) for m in messages]
        if len(messages) == 1 and (props.DELAY_TIME_LEVEL in encoded or _TIMER_KEYS in encoded):
            properties = props.decode_properties(encoded)  # only for the few sends that may wait
            placed = self.broker.parking.destination(topic, queue_id, messages[0], properties)
            return placed.topic, placed.queue_id, [placed.message]
        return topic, queue_id, messages

    async def _stored(self, count: int, stored: Awaitable[PutResult], queue_id: int | None) -> PutResult:
        result = await stored
        if queue_id is not None:
            result = dataclasses.replace(result, queue_id=queue_id)
        stats = self.broker.stats
        stats.standard_send_requests += 1
        stats.standard_send_messages += count
        return result

    async def _answer(self, request: RemotingCommand, stored: Awaitable[PutResult]) -> RemotingCommand:
        return send_response(self.broker, request, await stored)

    def _messages(
        self, header: SendMessageRequestHeader, raw: list[tuple[int, bytes, str]], batch: bool, born_host: str
    ) -> list[StandardMessage]:
        """The send's (flag, body, properties) messages, checked (a batch holds no parked message)."""
        messages = []
        for flag, body, sent in raw:
            properties = props.decode_properties(sent)
            encoded = sent
            if props.SCHEDULE_ORIGIN in properties:  # a consumed delivery sent on: only the schedule service sets it
                del properties[props.SCHEDULE_ORIGIN]
                encoded = props.encode_properties(properties)
            level = check_message(self.broker, body, encoded, properties, header.sys_flag)
            if (level or is_half(properties) or self.broker.parking.is_timer_message(properties)) and batch:
                raise ValidationError(BATCH_REFUSAL, code=ResponseCode.MESSAGE_ILLEGAL)
            messages.append(
                StandardMessage(
                    body=body,
                    properties=encoded,
                    tags=properties.get(props.TAGS) or None,
                    keys=properties.get(props.KEYS) or None,
                    uniq_key=properties.get(props.UNIQ_KEY) or None,
                    flag=flag,
                    sys_flag=header.sys_flag,
                    born_timestamp=header.born_timestamp,
                    born_host=born_host,
                    reconsume_times=header.reconsume_times or 0,
                    wait_store_ok=properties.get(props.WAIT_STORE_MSG_OK, "true") != "false",
                )
            )
        return messages
