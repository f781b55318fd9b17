"""The 5.x endpoint's access check: the same accounts (plain_acl.yml) and permission rules as the 4.x port.

A 5.x client signs every call with its credentials (`ClientConfiguration(endpoints, Credentials(ak,
sk))`) in the `authorization` header::

    authorization: MQv2-HMAC-SHA1 Credential=<access key>[/...], SignedHeaders=x-mq-date-time, Signature=<hex>

where the signature is the hex HMAC-SHA1, keyed by the secret key, of the `x-mq-date-time` header's
value (Apache RocketMQ 5's AuthorizationHeader and PlainAccessResource). The check goes as the 4.x
port's (broker/acl/validator.py): a globally white-listed address passes; an unsigned call, an access
key without an account and a wrong signature are UNAUTHORIZED; an address of the account's white
list passes without signature; then the RPC's resources need their permissions, as Apache 5.1's
PlainAccessResource asks them (FORBIDDEN otherwise): SendMessage and EndTransaction PUB on the topic,
ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue and
QueryAssignment SUB on the topic and the group, a consumer's Heartbeat and NotifyClientTermination
SUB on the group, QueryRoute PUB or SUB on the topic, Telemetry settings PUB on the topics published
and SUB on the group and topics subscribed; an RPC without a rule needs an admin account. Names are
taken within the call's namespace. The accounts file's reloads apply at once (the validator is the
4.x port's). Like Apache's, the signature covers only the date-time header, which is not checked for
freshness (the Python client writes its local time as if it were UTC): TLS (broker/grpc/tls.py)
keeps a header from being seen and replayed.

Refusals say what to fix; every value the peer chose is escaped and clipped in them, and so in the log.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping

from google.protobuf.message import Message

from broker.acl.addresses import client_ip
from broker.acl.permission import Perm
from broker.acl.resources import ADMIN, AUTHENTICATED, Needs, on_group, on_topic
from broker.acl.validator import AccessValidator
from broker.grpc.call import NAMESPACE, qualified
from broker.grpc.status import StatusError
from broker.grpc.v2 import definition_pb2 as pb
from broker.grpc.v2 import service_pb2 as service
from rocketspark.remoting.throttled_log import escaped

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
METHOD = "MQv2-HMAC-SHA1"
_FIX = "give the client credentials: ClientConfiguration(endpoints, Credentials(access_key, secret_key))"

_Rule = Callable[[Message, str], Needs]  # (request, namespace) -> needs


def _topic(resource: pb.Resource, namespace: str, perm: Perm) -> Needs:
    return Needs((on_topic(qualified(resource, namespace), perm),))


def _group_and_topic(group: pb.Resource, topic: pb.Resource, namespace: str) -> Needs:
    return Needs((on_group(qualified(group, namespace)), on_topic(qualified(topic, namespace), Perm.SUB)))


def _send(request: Message, namespace: str) -> Needs:
    assert isinstance(request, service.SendMessageRequest)
    topics = {qualified(m.topic, namespace) for m in request.messages}
    return Needs(tuple(on_topic(topic, Perm.PUB) for topic in sorted(topics)))


def _heartbeat(request: Message, namespace: str) -> Needs:
    assert isinstance(request, service.HeartbeatRequest)
    consumer = request.client_type in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER)
    return Needs((on_group(qualified(request.group, namespace)),)) if consumer else AUTHENTICATED


def _telemetry(request: Message, namespace: str) -> Needs:
    assert isinstance(request, service.TelemetryCommand)
    if not request.HasField("settings"):
        return AUTHENTICATED
    settings = request.settings
    needs = [on_topic(qualified(topic, namespace), Perm.PUB) for topic in settings.publishing.topics]
    if settings.HasField("subscription"):
        needs.append(on_group(qualified(settings.subscription.group, namespace)))
        needs += [on_topic(qualified(e.topic, namespace), Perm.SUB) for e in settings.subscription.subscriptions]
    return Needs(tuple(needs))


def _with_group(request: Message, namespace: str) -> Needs:
    group: pb.Resource = request.group  # type: ignore[attr-defined]
    return Needs((on_group(qualified(group, namespace)),)) if group.name else AUTHENTICATED


RULES: dict[str, _Rule] = {
    "QueryRoute": lambda r, ns: _topic(r.topic, ns, Perm.PUB | Perm.SUB),  # type: ignore[attr-defined]
    "Heartbeat": _heartbeat,
    "NotifyClientTermination": _with_group,
    "Telemetry": _telemetry,
    "SendMessage": _send,
    "EndTransaction": lambda r, ns: _topic(r.topic, ns, Perm.PUB),  # type: ignore[attr-defined]
    "ReceiveMessage": lambda r, ns: _group_and_topic(r.group, r.message_queue.topic, ns),  # type: ignore[attr-defined]
    "AckMessage": lambda r, ns: _group_and_topic(r.group, r.topic, ns),  # type: ignore[attr-defined]
    "ChangeInvisibleDuration": lambda r, ns: _group_and_topic(r.group, r.topic, ns),  # type: ignore[attr-defined]
    "ForwardMessageToDeadLetterQueue": lambda r, ns: _group_and_topic(r.group, r.topic, ns),  # type: ignore[attr-defined]
    "QueryAssignment": lambda r, ns: _group_and_topic(r.group, r.topic, ns),  # type: ignore[attr-defined]
}


def parse_authorization(header: str) -> tuple[str, str]:
    """(access key, hex signature) of an `authorization` header (the access key empty for a client
    without credentials); ValueError saying what is wrong."""
    method, _, rest = header.strip().partition(" ")
    if method != METHOD:
        raise ValueError(f"its method is {escaped(method)}, not {METHOD}")
    fields: dict[str, str] = {}
    for item in rest.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep:
            raise ValueError(f"{escaped(item.strip())} is not name=value")
        fields[name] = value
    if "Credential" not in fields or "Signature" not in fields:
        raise ValueError("it names no Credential or no Signature")
    return fields["Credential"].split("/")[0], fields["Signature"]


def signature(secret_key: str, date_time: str) -> str:
    """The hex HMAC-SHA1 of the date-time header, as 5.x clients sign it."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


class GrpcAuthorizer:
    """broker.grpc.call.Authorizer over the 4.x port's validator (its accounts, reloaded in place)."""

    def __init__(self, validator: AccessValidator) -> None:
        self._validator = validator

    def check(self, metadata: Mapping[str, str], rpc: str, request: Message, peer: str) -> str | None:
        config = self._validator.config  # one snapshot for the whole check
        ip = client_ip(peer)
        if any(matches(ip) for matches in config.global_white):
            return None
        header = metadata.get(AUTHORIZATION, "")
        try:
            access_key, signed = parse_authorization(header) if header else ("", "")
        except ValueError as exc:
            raise StatusError(pb.UNAUTHORIZED, f"the {rpc} call's authorization header cannot be read: {exc}") from None
        if not access_key:  # 5.x clients without credentials sign with an empty access key
            raise StatusError(pb.UNAUTHORIZED, f"the {rpc} call is not signed and this broker has ACL on: {_FIX}")
        account = config.accounts.get(access_key)
        if account is None:
            raise StatusError(
                pb.UNAUTHORIZED,
                f"access key {escaped(access_key)} has no account on this broker (plain_acl.yml): {_FIX}",
            )
        if account.white_address(ip):
            return access_key
        date_time = metadata.get(DATE_TIME, "")
        if not date_time or not hmac.compare_digest(signature(account.secret_key, date_time), signed.lower()):
            raise StatusError(
                pb.UNAUTHORIZED,
                f"the {rpc} call's signature does not match for access key {access_key}: check the client's secret key",
            )
        rule = RULES.get(rpc)
        needs = rule(request, metadata.get(NAMESPACE, "")) if rule is not None else ADMIN
        refusal = self._validator.refused_needs(ip, access_key, rpc, needs)
        if refusal is not None:
            raise StatusError(pb.FORBIDDEN, f"{refusal}; grant it in plain_acl.yml")
        return access_key
