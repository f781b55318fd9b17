"""Placeholder of helper B's consumption RPCs (ReceiveMessage, AckMessage, ChangeInvisibleDuration,
QueryAssignment, ForwardMessageToDeadLetterQueue): each answers NOT_IMPLEMENTED until broker/pop/ serves it."""

from __future__ import annotations

from collections.abc import AsyncIterator

from broker.grpc.call import Call
from broker.grpc.v2 import definition_pb2 as pb
from broker.grpc.v2 import service_pb2 as service

_NOT_YET = pb.Status(code=pb.NOT_IMPLEMENTED, message="consumption over gRPC is not served yet")


class ConsumingService:
    def __init__(self, broker: object) -> None:
        self._broker = broker

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def receive_message(
        self, request: service.ReceiveMessageRequest, call: Call
    ) -> AsyncIterator[service.ReceiveMessageResponse]:
        yield service.ReceiveMessageResponse(status=_NOT_YET)

    async def ack_message(self, request: service.AckMessageRequest, call: Call) -> service.AckMessageResponse:
        return service.AckMessageResponse(status=_NOT_YET)

    async def change_invisible_duration(
        self, request: service.ChangeInvisibleDurationRequest, call: Call
    ) -> service.ChangeInvisibleDurationResponse:
        return service.ChangeInvisibleDurationResponse(status=_NOT_YET)

    async def query_assignment(
        self, request: service.QueryAssignmentRequest, call: Call
    ) -> service.QueryAssignmentResponse:
        return service.QueryAssignmentResponse(status=_NOT_YET)

    async def forward_message_to_dead_letter_queue(
        self, request: service.ForwardMessageToDeadLetterQueueRequest, call: Call
    ) -> service.ForwardMessageToDeadLetterQueueResponse:
        return service.ForwardMessageToDeadLetterQueueResponse(status=_NOT_YET)
