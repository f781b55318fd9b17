"""`Call`: what one RPC of a 5.x client carries beside its request (its headers, its peer, its session).

Every 5.x call sends `x-mq-client-id`, `x-mq-language`, `x-mq-client-version`, `x-mq-namespace`,
`x-mq-request-id`, `x-mq-date-time` and `authorization` headers; the session (the client's settings and
Telemetry stream, broker/grpc/clients.py) is found by the client id. Names in requests are resources
within a namespace; the broker stores a namespaced name as Apache does (`namespace%name`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from google.protobuf.message import Message

from broker.grpc.status import StatusError
from broker.grpc.v2 import definition_pb2 as pb
from rocketspark.errors import ValidationError
from rocketspark.message.validation import validate_group, validate_topic

if TYPE_CHECKING:
    from broker.grpc.clients import ClientSession

CLIENT_ID = "x-mq-client-id"
LANGUAGE = "x-mq-language"
CLIENT_VERSION = "x-mq-client-version"
NAMESPACE = "x-mq-namespace"
REQUEST_ID = "x-mq-request-id"
#: between a namespace and a name, as Apache's NamespaceUtil wraps them
NAMESPACE_SEPARATOR = "%"


class Authorizer(Protocol):
    """The gRPC port's access check (broker/grpc/auth.py with aclEnable, else none)."""

    def check(self, metadata: Mapping[str, str], rpc: str, request: Message, peer: str) -> str | None:
        """The account (access key) the call is made by; raises StatusError (UNAUTHORIZED, FORBIDDEN)."""
        ...


@dataclass(frozen=True, slots=True)
class Call:
    client_id: str
    language: str
    client_version: str
    namespace: str
    peer: str  # "ip:port" of the client's connection
    request_id: str
    session: ClientSession
    account: str | None = None

    @property
    def settings(self) -> pb.Settings | None:
        """The settings the client sent last on its Telemetry stream (None before the first)."""
        return self.session.settings

    def topic(self, resource: pb.Resource) -> str:
        """The broker's name of a topic resource (checked; ILLEGAL_TOPIC when it is no topic name)."""
        return self._name(resource, validate_topic, pb.ILLEGAL_TOPIC)

    def group(self, resource: pb.Resource) -> str:
        """The broker's name of a consumer group resource (ILLEGAL_CONSUMER_GROUP when it is no group name)."""
        return self._name(resource, validate_group, pb.ILLEGAL_CONSUMER_GROUP)

    def _name(self, resource: pb.Resource, validate: Callable[[str], None], refusal: pb.Code) -> str:
        name = qualified(resource, self.namespace)
        try:
            validate(name)
        except ValidationError as exc:
            raise StatusError(refusal, str(exc)) from None
        return name


def qualified(resource: pb.Resource, namespace: str = "") -> str:
    """`namespace%name` when the resource (or else the call) names a namespace, else the name."""
    space = resource.resource_namespace or namespace
    if not space or resource.name.startswith(space + NAMESPACE_SEPARATOR):
        return resource.name
    return f"{space}{NAMESPACE_SEPARATOR}{resource.name}"


def resource(name: str, namespace: str = "") -> pb.Resource:
    """The resource a client knows as the broker's `name` (the namespace taken off again)."""
    return pb.Resource(**resource_fields(name, namespace))


def resource_fields(name: str, namespace: str = "") -> dict[str, str]:
    """:func:`resource`'s fields (for a message built of fields: broker/grpc/messages.py)."""
    prefix = namespace + NAMESPACE_SEPARATOR
    if namespace and name.startswith(prefix):
        return {"resource_namespace": namespace, "name": name[len(prefix) :]}
    return {"resource_namespace": namespace, "name": name}


def peer_address(peer: str) -> str:
    """`ipv4:127.0.0.1:5000` / `ipv6:[::1]:5000` (gRPC's form) -> `127.0.0.1:5000` / `[::1]:5000`."""
    scheme, sep, address = peer.partition(":")
    return address if sep and scheme in ("ipv4", "ipv6") else peer
