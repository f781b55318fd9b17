"""The 5.x consumption RPCs: ReceiveMessage, AckMessage, ChangeInvisibleDuration, QueryAssignment and
ForwardMessageToDeadLetterQueue, served by the pop engine (broker/pop/).

ReceiveMessage answers as Apache's proxy does: first a `status` (OK, or MESSAGE_NOT_FOUND when a
long poll found nothing), then one response per message, then a `delivery_timestamp`, also after
a refusal (the Python push consumer fails without it). Messages the stream could not carry (the
client went away) are made visible again after invisibleTimeMillisWhenClear. AckMessage answers
each entry's status and, overall, their one code or MULTIPLE_RESULTS. QueryAssignment gives a
push consumer one assignment of all the topic's queues on this broker (queue id -1), or, for a
group with consumeMessageOrderly, one per readable queue, as Apache's proxy does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Protocol

from broker.context import HasConfig
from broker.grpc.call import Call
from broker.grpc.messages import duration_ms, message_fields, timestamp
from broker.grpc.routes import endpoints, permission
from broker.grpc.status import StatusError, ok, status_of
from broker.grpc.v2 import definition_pb2 as pb
from broker.grpc.v2 import service_pb2 as service
from broker.pop.core import PopContext, now_ms
from broker.pop.errors import PopError
from broker.pop.filtering import message_filter
from broker.pop.receiving import Received, ReceiveRequest
from broker.pop.service import PopService
from rocketspark.errors import RocketMQError
from rocketspark.protocol.body.topic import Perm

#: queue id of an assignment of every queue of a topic on a broker
ALL_QUEUES = -1
_FILTER_TYPES = {pb.FILTER_TYPE_UNSPECIFIED: "TAG", pb.TAG: "TAG", pb.SQL: "SQL92"}


class ConsumingContext(PopContext, HasConfig, Protocol):
    """What the consumption RPCs read of the broker."""


def refusal_status(exc: PopError) -> pb.Status:
    return pb.Status(code=exc.refusal.value, message=str(exc))  # the refusal names its v2 Code


def _status(exc: PopError | StatusError | RocketMQError) -> pb.Status:
    return refusal_status(exc) if isinstance(exc, PopError) else status_of(exc)


class ConsumingService:
    def __init__(self, broker: ConsumingContext) -> None:
        self._broker = broker
        self.pop = PopService(broker)
        self._releases: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.pop.start()

    async def stop(self) -> None:
        if self._releases:
            await asyncio.gather(*self._releases, return_exceptions=True)
        await self.pop.stop()

    # -- ReceiveMessage ----------------------------------------------------------------------------

    async def receive_message(
        self, request: service.ReceiveMessageRequest, call: Call
    ) -> AsyncIterator[service.ReceiveMessageResponse]:
        try:
            pop_request = self._receive_request(request, call)
            received = await self.pop.receive(pop_request)
        except (PopError, StatusError, RocketMQError) as exc:
            yield service.ReceiveMessageResponse(status=_status(exc))
            yield _delivered_at()
            return
        if not received:
            yield service.ReceiveMessageResponse(status=pb.Status(code=pb.MESSAGE_NOT_FOUND, message="no new message"))
            yield _delivered_at()
            return
        yield service.ReceiveMessageResponse(status=ok())
        sent = 0
        try:
            for message in received:
                yield self._response(message, call)
                sent += 1
            yield _delivered_at()
        finally:
            if sent < len(received):  # the client went away: the rest are visible again soon
                self._release(pop_request, received[sent:])

    def _receive_request(self, request: service.ReceiveMessageRequest, call: Call) -> ReceiveRequest:
        group, topic = call.group(request.group), call.topic(request.message_queue.topic)
        expression = request.filter_expression
        kind = _FILTER_TYPES.get(expression.type)
        if kind is None:
            raise StatusError(pb.ILLEGAL_FILTER_EXPRESSION, "unknown filter expression type: use TAG")
        polling = self.pop.settings.max_long_polling_ms
        return ReceiveRequest(
            group,
            topic,
            request.batch_size,
            duration_ms(request.invisible_duration) if request.HasField("invisible_duration") else 0,
            filter=message_filter(kind, expression.expression),
            long_polling_ms=duration_ms(request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else polling,
            auto_renew=request.auto_renew,
            client_id=call.client_id,
            attempt_id=request.attempt_id if request.HasField("attempt_id") else None,
        )

    def _response(self, received: Received, call: Call) -> service.ReceiveMessageResponse:
        fields = message_fields(
            received.row,
            store_host=self._broker.address,
            namespace=call.namespace,
            receipt_handle=received.receipt_handle,
            delivery_attempt=received.delivery_attempt,
            invisible_duration_ms=received.invisible_ms,
        )
        return service.ReceiveMessageResponse(message=fields)

    def _release(self, request: ReceiveRequest, messages: list[Received]) -> None:
        async def release() -> None:
            for message in messages:
                with contextlib.suppress(PopError):  # acknowledged or delivered again meanwhile
                    await self.pop.change_invisible_duration(
                        request.group, request.topic, message.receipt_handle, self.pop.settings.clear_ms
                    )

        task = asyncio.get_running_loop().create_task(release(), name="pop-release")
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    # -- AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue ------------------------

    async def ack_message(self, request: service.AckMessageRequest, call: Call) -> service.AckMessageResponse:
        group, topic = call.group(request.group), call.topic(request.topic)
        entries = request.entries
        refusals = await self.pop.ack_all(group, topic, [entry.receipt_handle for entry in entries])
        results = [
            service.AckMessageResultEntry(
                message_id=entry.message_id,
                receipt_handle=entry.receipt_handle,
                status=ok() if refusal is None else refusal_status(refusal),
            )
            for entry, refusal in zip(entries, refusals, strict=True)
        ]
        codes = {result.status.code for result in results}
        if not codes:
            overall = pb.Status(code=pb.BAD_REQUEST, message="the ack names no message: give at least one entry")
        elif len(codes) > 1:
            overall = pb.Status(code=pb.MULTIPLE_RESULTS, message="the entries have different results")
        else:
            overall = results[0].status
        return service.AckMessageResponse(status=overall, entries=results)

    async def change_invisible_duration(
        self, request: service.ChangeInvisibleDurationRequest, call: Call
    ) -> service.ChangeInvisibleDurationResponse:
        group, topic = call.group(request.group), call.topic(request.topic)
        try:
            handle = await self.pop.change_invisible_duration(
                group, topic, request.receipt_handle, duration_ms(request.invisible_duration)
            )
        except PopError as exc:
            return service.ChangeInvisibleDurationResponse(status=refusal_status(exc))
        return service.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=handle)

    async def forward_message_to_dead_letter_queue(
        self, request: service.ForwardMessageToDeadLetterQueueRequest, call: Call
    ) -> service.ForwardMessageToDeadLetterQueueResponse:
        group, topic = call.group(request.group), call.topic(request.topic)
        try:
            await self.pop.forward_to_dead_letter(group, topic, request.receipt_handle)
        except PopError as exc:
            return service.ForwardMessageToDeadLetterQueueResponse(status=refusal_status(exc))
        return service.ForwardMessageToDeadLetterQueueResponse(status=ok())

    # -- QueryAssignment ----------------------------------------------------------------------------

    async def query_assignment(
        self, request: service.QueryAssignmentRequest, call: Call
    ) -> service.QueryAssignmentResponse:
        broker = self._broker
        group, topic = call.group(request.group), call.topic(request.topic)
        config = broker.subscription_groups.find(group)
        if config is None:
            raise StatusError(
                pb.CONSUMER_GROUP_NOT_FOUND,
                f"consumer group {group} does not exist: create it first (autoCreateSubscriptionGroup=false)",
            )
        topic_config = broker.topics.get(topic)
        if topic_config is None:
            raise StatusError(pb.TOPIC_NOT_FOUND, f"topic {topic} does not exist: create it first")
        if not topic_config.perm & Perm.READ or topic_config.read_queue_nums <= 0:
            return service.QueryAssignmentResponse(status=pb.Status(code=pb.FORBIDDEN, message="no readable queue"))
        me = pb.Broker(
            name=broker.config.broker_name,
            id=0,
            endpoints=endpoints(broker.config.broker_ip1, broker.config.grpc_server_port),
        )
        queue_ids = range(topic_config.read_queue_nums) if config.consume_message_orderly else [ALL_QUEUES]
        assignments = [
            pb.Assignment(
                message_queue=pb.MessageQueue(
                    topic=request.topic, id=queue_id, permission=permission(topic_config, max(queue_id, 0)), broker=me
                )
            )
            for queue_id in queue_ids
        ]
        return service.QueryAssignmentResponse(status=ok(), assignments=assignments)


def _delivered_at() -> service.ReceiveMessageResponse:
    return service.ReceiveMessageResponse(delivery_timestamp=timestamp(now_ms()))
