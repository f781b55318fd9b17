"""5.x clients by `x-mq-client-id`: their settings, their Telemetry stream, their place in the managers.

A 5.x client is not a connection: its RPCs may come on any HTTP/2 stream, so the broker keeps one
:class:`ClientSession` per client id. Its :class:`GrpcClientChannel` is the ClientConnection the
producer and consumer managers hold for it (so tools and the transaction check see 5.x clients as they
see 4.x ones, as Apache's proxy registers them): a request the broker sends it (the check's
CHECK_TRANSACTION_STATE) becomes a command on the client's Telemetry stream. Producers are registered
under the topics they publish to (Apache's proxy does so: its half messages name the topic as their
producer group), consumers under their group with the subscriptions of their settings.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from broker.grpc.call import qualified
from broker.grpc.status import StatusError
from broker.grpc.v2 import definition_pb2 as pb
from broker.grpc.v2 import service_pb2 as service
from broker.managers.client_channel import ClientChannelInfo
from broker.managers.consumer_manager import ConsumerManager
from broker.managers.producer_manager import ProducerManager
from rocketspark.errors import ConnectionClosedError, ValidationError
from rocketspark.message.filter import build_subscription
from rocketspark.protocol.body.heartbeat import ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData
from rocketspark.protocol.codes import LanguageCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.throttled_log import escaped

log = logging.getLogger(__name__)

#: a 4.x subscription's expression type of SQL92 filters
SQL92 = "SQL92"
#: MQVersion.V5_0_0's ordinal: the version the managers show for a 5.x client
V5_VERSION = 413
#: x-mq-language values whose LanguageCode is spelt differently
_LANGUAGES = {"GOLANG": LanguageCode.GO, "DOT_NET": LanguageCode.DOTNET}

#: turns a request the broker sends a client into the Telemetry command that carries it to a 5.x
#: client; None for a request 5.x clients have no command for
Translate = Callable[[RemotingCommand], service.TelemetryCommand | None]


def language_code(language: str) -> LanguageCode:
    """The LanguageCode of an x-mq-language header (OTHER for one 4.x has no code for)."""
    code = _LANGUAGES.get(language)
    if code is not None:
        return code
    try:
        return LanguageCode[language]
    except KeyError:
        return LanguageCode.OTHER


class ClientSession:
    """One 5.x client: its settings (from its Telemetry stream), the stream, its registrations."""

    def __init__(
        self, client_id: str, language: str, peer: str, translate: Translate, forget: Callable[[ClientSession], None]
    ) -> None:
        self.client_id = client_id
        self.language = language
        self.peer = peer
        self.settings: pb.Settings | None = None
        self.channel = GrpcClientChannel(self, translate, forget)
        self.producer_groups: set[str] = set()
        self.consumer_group: str | None = None
        self._stream: asyncio.Queue[service.TelemetryCommand | None] | None = None

    @property
    def client_type(self) -> pb.ClientType:
        if self.settings is None:
            return pb.CLIENT_TYPE_UNSPECIFIED
        return self.settings.client_type

    def open_stream(self) -> asyncio.Queue[service.TelemetryCommand | None]:
        """The outbox of a new Telemetry stream; a stream still open for the client is ended (a client
        keeps one per endpoint and opens it again after an error)."""
        self.end_stream()
        self._stream = asyncio.Queue()
        return self._stream

    def stream_closed(self, stream: asyncio.Queue[service.TelemetryCommand | None]) -> None:
        if self._stream is stream:
            self._stream = None

    def end_stream(self) -> None:
        if self._stream is not None:
            self._stream.put_nowait(None)
            self._stream = None

    @property
    def streaming(self) -> bool:
        """Whether the client has a Telemetry stream open."""
        return self._stream is not None

    def push(self, command: service.TelemetryCommand) -> bool:
        """Send a command on the client's Telemetry stream; False when none is open."""
        if self._stream is None:
            return False
        self._stream.put_nowait(command)
        return True

    def channel_info(self) -> ClientChannelInfo:
        return ClientChannelInfo(
            self.channel, self.client_id, language_code(self.language), V5_VERSION, int(time.time() * 1000)
        )


class GrpcClientChannel:
    """The managers' ClientConnection for a 5.x client (hashable by identity, one per session)."""

    def __init__(self, session: ClientSession, translate: Translate, forget: Callable[[ClientSession], None]) -> None:
        self._session = session
        self._translate = translate
        self._forget = forget
        self.closed = False

    @property
    def remote_address(self) -> str:
        return self._session.peer

    def invoke_oneway(self, request: RemotingCommand) -> None:
        command = self._translate(request)
        if command is None:  # e.g. NOTIFY_CONSUMER_IDS_CHANGED: 5.x clients ask QueryAssignment instead
            return
        if not self._session.push(command):
            raise ConnectionClosedError(
                f"the 5.x client {escaped(self._session.client_id)} has no Telemetry stream open to send to"
            )

    def close(self, reason: str = "closed locally") -> None:
        """The managers dropped the client (it sent no heartbeat for channelExpiredTimeout)."""
        log.info("5.x client %s dropped: %s", escaped(self._session.client_id), reason)
        self.closed = True
        self._session.end_stream()
        self._forget(self._session)


class GrpcClients:
    """The sessions, by client id, and their registrations in the producer and consumer managers."""

    def __init__(self, producers: ProducerManager, consumers: ConsumerManager, translate: Translate) -> None:
        self._producers = producers
        self._consumers = consumers
        self._translate = translate
        self._sessions: dict[str, ClientSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def session(self, client_id: str, language: str, peer: str) -> ClientSession:
        """The client's session; a new one (kept only once the client opens its Telemetry stream or
        registers, so calls of clients that never do leave nothing behind) when there is none."""
        session = self._sessions.get(client_id)
        if session is None or session.channel.closed:
            return ClientSession(client_id, language, peer, self._translate, self._forget)
        session.peer = peer
        return session

    def get(self, client_id: str) -> ClientSession | None:
        return self._sessions.get(client_id)

    def keep(self, session: ClientSession) -> None:
        """Keep the session for the client's next calls (its Telemetry stream is open, or it registered)."""
        if not session.channel.closed:
            self._sessions[session.client_id] = session

    def stream_ended(self, session: ClientSession) -> None:
        """The client's Telemetry stream ended: a client registered nowhere (and with no other stream) is forgotten."""
        if not session.streaming and not session.producer_groups and session.consumer_group is None:
            self._forget(session)

    def _forget(self, session: ClientSession) -> None:
        if self._sessions.get(session.client_id) is session:
            del self._sessions[session.client_id]

    def register_producer(self, session: ClientSession, groups: Iterable[str]) -> None:
        """Register (again: a heartbeat) the producer under each of `groups` (topic names)."""
        session.producer_groups.update(groups)
        self.keep(session)
        channel = session.channel_info()
        for group in session.producer_groups:
            self._producers.register(group, channel)

    def register_consumer(self, session: ClientSession, group: str, client_type: pb.ClientType) -> None:
        """Register (again: a heartbeat) the consumer in `group`, with its settings' subscriptions."""
        if session.consumer_group not in (None, group):
            self._consumers.unregister(session.consumer_group, session.channel)
        session.consumer_group = group
        self.keep(session)
        push = client_type == pb.PUSH_CONSUMER
        self._consumers.register(
            group,
            session.channel_info(),
            consume_type=ConsumeType.CONSUME_PASSIVELY if push else ConsumeType.CONSUME_ACTIVELY,
            message_model=MessageModel.CLUSTERING,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            subscriptions=subscriptions(session.settings),
            notify=False,  # 5.x clients learn their assignment from QueryAssignment
        )

    def terminate(self, session: ClientSession) -> None:
        """The client is shutting down (NotifyClientTermination): forget it and end its stream."""
        for group in session.producer_groups:
            self._producers.unregister(group, session.channel)
        if session.consumer_group is not None:
            self._consumers.unregister(session.consumer_group, session.channel)
        session.end_stream()
        session.channel.closed = True
        self._forget(session)

    def end_streams(self) -> None:
        """End every Telemetry stream (the broker stops)."""
        for session in self._sessions.values():
            session.end_stream()


def subscriptions(settings: pb.Settings | None) -> list[SubscriptionData]:
    """The 4.x subscriptions of a consumer's settings: tag expressions as a 4.x heartbeat carries them
    (ILLEGAL_FILTER_EXPRESSION for a malformed one), SQL92 expressions as their text (the pop engine
    evaluates them; the managers only show them)."""
    if settings is None or not settings.HasField("subscription"):
        return []
    result = []
    for entry in settings.subscription.subscriptions:
        topic = qualified(entry.topic)
        if entry.expression.type == pb.SQL:
            result.append(SubscriptionData(topic, sub_string=entry.expression.expression, expression_type=SQL92))
            continue
        try:
            result.append(build_subscription(topic, entry.expression.expression or "*"))
        except ValidationError as exc:
            raise StatusError(pb.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None
    return result
