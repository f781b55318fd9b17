"""SendMessage: 5.x messages stored through the 4.x send path (broker/processors/send.py).

Each message of a request is checked and mapped (broker/grpc/messages.py), then stored by the same
`SendMessageProcessor.store` a 4.x SEND_MESSAGE uses, so retries and dead letters, delays (the timer
properties), half messages and the duplicate window behave alike for both protocols. The broker
picks the queue, as Apache's proxy does (the request names none): a FIFO message's group always goes
to one queue (|Java hashCode of the group| modulo the write queues, the 4.x sharding-key rule, so 4.x
and 5.x producers of one group share its queue), other messages go round robin. Messages of one
request are queued for the store in their order, so a group's messages keep it.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Awaitable
from typing import Protocol

from broker.context import HasConfig, HasStoreConfig, HasTopics
from broker.flavor import Flavor
from broker.grpc.call import Call
from broker.grpc.clients import GrpcClients
from broker.grpc.messages import Outgoing, outgoing
from broker.grpc.routes import DEFAULT_TOPIC, Routes
from broker.grpc.status import StatusError, ok, status_of
from broker.grpc.transactions import Transactions
from broker.grpc.v2 import definition_pb2 as pb
from broker.grpc.v2 import service_pb2 as service
from broker.processors.send import SendMessageProcessor, resolve_send_queue
from broker.store.results import PutResult, PutStatus
from rocketspark.errors import RocketMQError
from rocketspark.message.hashing import java_string_hash
from rocketspark.message.properties import codec as props
from rocketspark.protocol.headers.send import SendMessageRequestHeader

log = logging.getLogger(__name__)


#: a message queued for the store (what was sent, its stored result to come), or why it was refused
_Queued = tuple[Outgoing, Awaitable[PutResult]] | StatusError | RocketMQError


class SendingContext(HasConfig, HasStoreConfig, HasTopics, Protocol):
    """What SendMessage reads of the broker beside the send processor."""


class Sending:
    def __init__(
        self,
        broker: SendingContext,
        processor: SendMessageProcessor,
        routes: Routes,
        transactions: Transactions,
        clients: GrpcClients,
    ) -> None:
        self._broker = broker
        self._processor = processor
        self._routes = routes
        self._transactions = transactions
        self._clients = clients
        self._next_queue = itertools.count()

    async def send(self, request: service.SendMessageRequest, call: Call) -> service.SendMessageResponse:
        if not request.messages:
            raise StatusError(pb.MESSAGE_CORRUPTED, "the request holds no message")
        # every message is queued for the store before the first answer is awaited: their order holds
        stored = [self._store(message, call) for message in request.messages]
        entries = []
        for message, put in zip(request.messages, stored, strict=True):
            entries.append(await self._entry(message, put))
        codes = {entry.status.code for entry in entries}
        if len(codes) == 1:
            status = entries[0].status if codes != {pb.OK} else ok()
        else:
            status = pb.Status(code=pb.MULTIPLE_RESULTS, message="the messages were not all stored: see each entry")
        return service.SendMessageResponse(status=status, entries=entries)

    def _store(
        self, message: pb.Message, call: Call
    ) -> tuple[Outgoing, Awaitable[PutResult]] | StatusError | RocketMQError:
        """Check the message and queue it for the store; the refusal instead when it is refused."""
        try:
            topic = call.topic(message.topic)
            mapped = outgoing(message, topic, self._broker.store_config.max_message_size)
            self._check_delivery_time(mapped)
            config = self._routes.topic_config(topic)
            group = mapped.properties.get(props.SHARDING_KEY)
            if group:
                queue_id = abs(java_string_hash(group)) % config.write_queue_nums
            else:
                queue_id = next(self._next_queue) % config.write_queue_nums
            header = SendMessageRequestHeader(
                producer_group=topic,
                topic=topic,
                default_topic=DEFAULT_TOPIC,
                default_topic_queue_nums=self._broker.config.default_topic_queue_nums,
                queue_id=queue_id,
                sys_flag=mapped.sys_flag,
                born_timestamp=mapped.born_timestamp,
                flag=0,
            )
            resolve_send_queue(self._broker, header, call.session.channel)
            if topic not in call.session.producer_groups:  # the transaction check asks a topic's producers
                self._clients.register_producer(call.session, (topic,))
            raw = [(0, mapped.body, props.encode_properties(mapped.properties))]
            return mapped, self._processor.store(header, queue_id, raw, batch=False, born_host=call.peer)
        except (StatusError, RocketMQError) as exc:
            return exc

    def _check_delivery_time(self, mapped: Outgoing) -> None:
        """A delivery time further ahead than timerMaxDelaySec is ILLEGAL_DELIVERY_TIME, as Apache's proxy
        answers (the shared send path would refuse it as MESSAGE_ILLEGAL, BAD_REQUEST to a 5.x client)."""
        due = mapped.properties.get(props.TIMER_DELIVER_MS)
        if due is None or self._broker.config.flavor is Flavor.apache:  # Apache 4.9 has no timers
            return
        limit_s = self._broker.store_config.timer_max_delay_sec
        if int(due) - time.time() * 1000 > limit_s * 1000:
            raise StatusError(
                pb.ILLEGAL_DELIVERY_TIME,
                f"the delivery time is more than {limit_s} s ahead (timerMaxDelaySec): deliver it sooner, or raise "
                "timerMaxDelaySec",
            )

    async def _entry(self, message: pb.Message, stored: _Queued) -> service.SendResultEntry:
        message_id = message.system_properties.message_id
        if isinstance(stored, (StatusError, RocketMQError)):
            return service.SendResultEntry(status=status_of(stored), message_id=message_id)
        mapped, put = stored
        try:
            result = await put
        except RocketMQError as exc:
            return service.SendResultEntry(status=status_of(exc), message_id=message_id)
        if result.status is PutStatus.FLUSH_DISK_TIMEOUT:
            status = pb.Status(
                code=pb.MASTER_PERSISTENCE_TIMEOUT, message="stored, but its flush to disk outlasted syncFlushTimeout"
            )
        else:
            status = ok()
        transaction_id = ""
        if mapped.message_type == pb.TRANSACTION:
            transaction_id = self._transactions.transaction_id(result.commit_log_offsets[0], result.first_queue_offset)
        return service.SendResultEntry(
            status=status, message_id=message_id, offset=result.first_queue_offset, transaction_id=transaction_id
        )
