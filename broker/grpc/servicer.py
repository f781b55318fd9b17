"""`MessagingServicer`: the RPCs of `apache.rocketmq.v2.MessagingService`, each thin.

Every RPC builds its :class:`~broker.grpc.call.Call` (client id required, the access check of
broker/grpc/auth.py when ACL is on), hands the request to the part that serves it and answers a
refusal in the answer's `status`, as 5.x clients expect (never as a gRPC error). Consumption RPCs
go to broker/grpc/consuming.py. RPCs the broker does not serve answer NOT_IMPLEMENTED saying so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from broker.grpc import settings
from broker.grpc.call import (
    CLIENT_ID,
    CLIENT_VERSION,
    LANGUAGE,
    NAMESPACE,
    REQUEST_ID,
    Authorizer,
    Call,
    peer_address,
)
from broker.grpc.clients import GrpcClients
from broker.grpc.consuming import ConsumingService
from broker.grpc.routes import Routes
from broker.grpc.sending import Sending
from broker.grpc.status import StatusError, ok, status_of
from broker.grpc.transactions import Transactions
from broker.grpc.v2 import definition_pb2 as pb
from broker.grpc.v2 import service_pb2 as service
from rocketspark.errors import RocketMQError
from rocketspark.remoting.throttled_log import ThrottledLog, escaped

log = logging.getLogger(__name__)
_refusals = ThrottledLog(log, logging.INFO)

Response = TypeVar("Response", bound=Message)


def _not_served(rpc: str) -> pb.Status:
    return pb.Status(code=pb.NOT_IMPLEMENTED, message=f"{rpc} is not served by this broker (docs/protocol.md)")


class MessagingServicer:
    """Registered with `service_pb2_grpc.add_MessagingServiceServicer_to_server` (a method per RPC)."""

    def __init__(
        self,
        broker: settings.SettingsContext,
        clients: GrpcClients,
        routes: Routes,
        sending: Sending,
        transactions: Transactions,
        consuming: ConsumingService,
        authorizer: Authorizer | None,
        peers: Callable[[str], str] = peer_address,
    ) -> None:
        """`peers`: the client's "ip:port" for gRPC's peer string (broker/grpc/tls.py's, when it hands
        connections over)."""
        self._broker = broker
        self._clients = clients
        self._routes = routes
        self._sending = sending
        self._transactions = transactions
        self._consuming = consuming
        self._authorizer = authorizer
        self._peer = peers

    # -- calls ----------------------------------------------------------------------------------

    def _call(self, context: grpc.aio.ServicerContext[Message, Message], rpc: str, request: Message) -> Call:
        metadata: Mapping[str, str] = {
            key: value for key, value in (context.invocation_metadata() or ()) if isinstance(value, str)
        }
        peer = self._peer(context.peer())
        client_id = metadata.get(CLIENT_ID, "")
        if not client_id:
            raise StatusError(pb.CLIENT_ID_REQUIRED, f"the {rpc} call has no {CLIENT_ID} header (5.x clients send one)")
        account = self._authorizer.check(metadata, rpc, request, peer) if self._authorizer is not None else None
        language = metadata.get(LANGUAGE, "")
        return Call(
            client_id=client_id,
            language=language,
            client_version=metadata.get(CLIENT_VERSION, ""),
            namespace=metadata.get(NAMESPACE, ""),
            peer=peer,
            request_id=metadata.get(REQUEST_ID, ""),
            session=self._clients.session(client_id, language, peer),
            account=account,
        )

    async def _unary(
        self,
        rpc: str,
        request: Message,
        context: grpc.aio.ServicerContext[Message, Message],
        handle: Callable[[Call], Awaitable[Response]],
        answer: Callable[..., Response],  # the response class: answer(status=...)
    ) -> Response:
        try:
            return await handle(self._call(context, rpc, request))
        except (StatusError, RocketMQError) as exc:
            _refusals.log(f"refused-{rpc}", "5.x %s from %s refused: %s", rpc, self._peer(context.peer()), exc)
            return answer(status=status_of(exc))
        except Exception:
            log.exception("5.x %s from %s failed", rpc, escaped(self._peer(context.peer())))
            return answer(
                status=pb.Status(code=pb.INTERNAL_SERVER_ERROR, message=f"{rpc} failed in the broker: see its log")
            )

    # -- routes, clients ---------------------------------------------------------------------------

    async def QueryRoute(
        self, request: service.QueryRouteRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.QueryRouteResponse:
        async def handle(call: Call) -> service.QueryRouteResponse:
            return self._routes.query_route(request, call)

        return await self._unary("QueryRoute", request, context, handle, service.QueryRouteResponse)

    async def Heartbeat(
        self, request: service.HeartbeatRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.HeartbeatResponse:
        async def handle(call: Call) -> service.HeartbeatResponse:
            self._register(call, call.settings, request.group if request.HasField("group") else None)
            return service.HeartbeatResponse(status=ok())

        return await self._unary("Heartbeat", request, context, handle, service.HeartbeatResponse)

    def _register(self, call: Call, sent: pb.Settings | None, group: pb.Resource | None) -> None:
        """Register the client in the producer or consumer manager, from its settings (a heartbeat)."""
        if sent is None:
            raise StatusError(
                pb.UNRECOGNIZED_CLIENT_TYPE, "no settings from this client yet: it must open its Telemetry stream first"
            )
        if sent.client_type == pb.PRODUCER:
            self._clients.register_producer(call.session, (call.topic(topic) for topic in sent.publishing.topics))
        elif sent.client_type in settings.CONSUMER_TYPES:
            resource = group if group is not None and group.name else sent.subscription.group
            self._clients.register_consumer(call.session, call.group(resource), sent.client_type)

    async def NotifyClientTermination(
        self, request: service.NotifyClientTerminationRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.NotifyClientTerminationResponse:
        async def handle(call: Call) -> service.NotifyClientTerminationResponse:
            self._clients.terminate(call.session)
            return service.NotifyClientTerminationResponse(status=ok())

        return await self._unary(
            "NotifyClientTermination", request, context, handle, service.NotifyClientTerminationResponse
        )

    async def Telemetry(
        self,
        requests: AsyncIterator[service.TelemetryCommand],
        context: grpc.aio.ServicerContext[Message, Message],
    ) -> AsyncIterator[service.TelemetryCommand]:
        """The client's settings in, the broker's settings (and checks of orphaned transactions) out."""
        try:
            call = self._call(context, "Telemetry", service.TelemetryCommand())
        except StatusError as exc:
            yield service.TelemetryCommand(status=exc.status())
            return
        outbox = call.session.open_stream()
        self._clients.keep(call.session)
        reader = asyncio.create_task(self._read_telemetry(requests, context, outbox))
        try:
            while (command := await outbox.get()) is not None:
                yield command
        finally:
            reader.cancel()
            call.session.stream_closed(outbox)
            self._clients.stream_ended(call.session)

    async def _read_telemetry(
        self,
        requests: AsyncIterator[service.TelemetryCommand],
        context: grpc.aio.ServicerContext[Message, Message],
        outbox: asyncio.Queue[service.TelemetryCommand | None],
    ) -> None:
        try:
            async for command in requests:
                if command.HasField("settings"):
                    outbox.put_nowait(self._settings(command, context))
                # thread stack traces and verify results answer commands this broker never sends
        except grpc.aio.AioRpcError:
            pass  # the client went away; the writer's side ends with the stream
        except Exception:
            log.exception("5.x Telemetry stream of %s failed", escaped(self._peer(context.peer())))
        finally:
            outbox.put_nowait(None)

    def _settings(
        self, command: service.TelemetryCommand, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.TelemetryCommand:
        try:
            call = self._call(context, "Telemetry", command)
            answered = settings.answer(self._broker, command.settings, call)
            call.session.settings = command.settings
            self._register(call, command.settings, None)
        except (StatusError, RocketMQError) as exc:
            _refusals.log("refused-settings", "5.x settings from %s refused: %s", self._peer(context.peer()), exc)
            return service.TelemetryCommand(status=status_of(exc))
        return service.TelemetryCommand(status=ok(), settings=answered)

    # -- publishing -------------------------------------------------------------------------------

    async def SendMessage(
        self, request: service.SendMessageRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.SendMessageResponse:
        return await self._unary(
            "SendMessage", request, context, lambda call: self._sending.send(request, call), service.SendMessageResponse
        )

    async def EndTransaction(
        self, request: service.EndTransactionRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.EndTransactionResponse:
        return await self._unary(
            "EndTransaction",
            request,
            context,
            lambda call: self._transactions.end(request, call),
            service.EndTransactionResponse,
        )

    # -- consumption (broker/grpc/consuming.py) ---------------------------------------------------------

    async def QueryAssignment(
        self, request: service.QueryAssignmentRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.QueryAssignmentResponse:
        return await self._unary(
            "QueryAssignment",
            request,
            context,
            lambda call: self._consuming.query_assignment(request, call),
            service.QueryAssignmentResponse,
        )

    async def ReceiveMessage(
        self, request: service.ReceiveMessageRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> AsyncIterator[service.ReceiveMessageResponse]:
        try:
            call = self._call(context, "ReceiveMessage", request)
            async for response in self._consuming.receive_message(request, call):
                yield response
        except (StatusError, RocketMQError) as exc:
            _refusals.log("refused-receive", "5.x ReceiveMessage from %s refused: %s", self._peer(context.peer()), exc)
            yield service.ReceiveMessageResponse(status=status_of(exc))

    async def AckMessage(
        self, request: service.AckMessageRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.AckMessageResponse:
        return await self._unary(
            "AckMessage",
            request,
            context,
            lambda call: self._consuming.ack_message(request, call),
            service.AckMessageResponse,
        )

    async def ChangeInvisibleDuration(
        self, request: service.ChangeInvisibleDurationRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.ChangeInvisibleDurationResponse:
        return await self._unary(
            "ChangeInvisibleDuration",
            request,
            context,
            lambda call: self._consuming.change_invisible_duration(request, call),
            service.ChangeInvisibleDurationResponse,
        )

    async def ForwardMessageToDeadLetterQueue(
        self,
        request: service.ForwardMessageToDeadLetterQueueRequest,
        context: grpc.aio.ServicerContext[Message, Message],
    ) -> service.ForwardMessageToDeadLetterQueueResponse:
        return await self._unary(
            "ForwardMessageToDeadLetterQueue",
            request,
            context,
            lambda call: self._consuming.forward_message_to_dead_letter_queue(request, call),
            service.ForwardMessageToDeadLetterQueueResponse,
        )

    # -- not served ---------------------------------------------------------------------------------

    async def PullMessage(
        self, request: service.PullMessageRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> AsyncIterator[service.PullMessageResponse]:
        yield service.PullMessageResponse(status=_not_served("PullMessage"))

    async def UpdateOffset(
        self, request: service.UpdateOffsetRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.UpdateOffsetResponse:
        return service.UpdateOffsetResponse(status=_not_served("UpdateOffset"))

    async def GetOffset(
        self, request: service.GetOffsetRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.GetOffsetResponse:
        return service.GetOffsetResponse(status=_not_served("GetOffset"))

    async def QueryOffset(
        self, request: service.QueryOffsetRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.QueryOffsetResponse:
        return service.QueryOffsetResponse(status=_not_served("QueryOffset"))

    async def RecallMessage(
        self, request: service.RecallMessageRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.RecallMessageResponse:
        return service.RecallMessageResponse(status=_not_served("RecallMessage"))

    async def SyncLiteSubscription(
        self, request: service.SyncLiteSubscriptionRequest, context: grpc.aio.ServicerContext[Message, Message]
    ) -> service.SyncLiteSubscriptionResponse:
        return service.SyncLiteSubscriptionResponse(status=_not_served("SyncLiteSubscription"))
