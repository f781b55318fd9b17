"""The 5.x endpoint's access check (broker/grpc/auth.py) on its own: headers as Java and Python clients
write them, the permission each RPC needs, white lists, and what a hostile peer's values become."""

from __future__ import annotations

import pytest

from broker.acl.accounts import parse_acl
from broker.acl.validator import AccessValidator
from broker.grpc.auth import GrpcAuthorizer, parse_authorization, signature
from broker.grpc.status import StatusError
from broker.grpc.v2 import definition_pb2 as pb
from broker.grpc.v2 import service_pb2 as service

ACCOUNTS = """
globalWhiteRemoteAddresses: [10.9.8.*]
accounts:
  - accessKey: writer_key
    secretKey: writer-secret
    defaultTopicPerm: DENY
    topicPerms: [orders=PUB, ns1%orders=PUB]
  - accessKey: reader_key
    secretKey: reader-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    groupPerms: [readers=SUB]
  - accessKey: local_key
    secretKey: local-secret
    whiteRemoteAddress: 192.168.7.7
    defaultTopicPerm: DENY
"""
DATE = "20261201T101010Z"
PEER = "127.0.0.1:50000"


def authorizer() -> GrpcAuthorizer:
    return GrpcAuthorizer(AccessValidator(parse_acl(ACCOUNTS, "test")))


def headers(access_key: str, secret: str, *, credential_suffix: str = "", namespace: str = "") -> dict[str, str]:
    return {
        "authorization": f"MQv2-HMAC-SHA1 Credential={access_key}{credential_suffix}, SignedHeaders=x-mq-date-time, "
        f"Signature={signature(secret, DATE)}",
        "x-mq-date-time": DATE,
        "x-mq-namespace": namespace,
    }


def send(topic: str) -> service.SendMessageRequest:
    return service.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic), body=b"x")])


def refusal(metadata: dict[str, str], rpc: str, request: object, peer: str = PEER) -> StatusError:
    with pytest.raises(StatusError) as refused:
        authorizer().check(metadata, rpc, request, peer)  # type: ignore[arg-type]
    return refused.value


def test_headers_of_both_clients_are_read() -> None:
    # the Java client adds /region/service to the access key; Python's names the key alone
    assert parse_authorization(headers("writer_key", "s", credential_suffix="/cn/rocketmq")["authorization"])[0] == (
        "writer_key"
    )
    assert authorizer().check(headers("writer_key", "writer-secret"), "SendMessage", send("orders"), PEER) == (
        "writer_key"
    )
    with pytest.raises(ValueError, match="method"):
        parse_authorization("Basic dXNlcjpwYXNz")


def test_each_rpc_needs_its_permissions() -> None:
    check = authorizer().check
    writer, reader = headers("writer_key", "writer-secret"), headers("reader_key", "reader-secret")
    forbidden = refusal(writer, "SendMessage", send("payments"))
    assert forbidden.code == pb.FORBIDDEN and "PUB on topic payments for access key writer_key" in str(forbidden)
    route = service.QueryRouteRequest(topic=pb.Resource(name="orders"))
    assert check(reader, "QueryRoute", route, PEER) == "reader_key"  # PUB or SUB
    receive = service.ReceiveMessageRequest(
        group=pb.Resource(name="readers"), message_queue=pb.MessageQueue(topic=pb.Resource(name="orders"))
    )
    assert check(reader, "ReceiveMessage", receive, PEER) == "reader_key"
    receive.group.name = "others"
    assert "SUB on group others" in str(refusal(reader, "ReceiveMessage", receive))
    consumer_beat = service.HeartbeatRequest(group=pb.Resource(name="others"), client_type=pb.SIMPLE_CONSUMER)
    assert refusal(reader, "Heartbeat", consumer_beat).code == pb.FORBIDDEN
    assert check(reader, "Heartbeat", service.HeartbeatRequest(client_type=pb.PRODUCER), PEER) == "reader_key"
    settings = service.TelemetryCommand(
        settings=pb.Settings(publishing=pb.Publishing(topics=[pb.Resource(name="orders")]))
    )
    assert check(writer, "Telemetry", settings, PEER) == "writer_key"
    assert "PUB on topic orders" in str(refusal(reader, "Telemetry", settings))
    assert "needs an admin account" in str(refusal(writer, "SomeNewRpc", service.QueryRouteRequest()))
    # within the call's namespace, as the broker stores the names
    spaced = headers("writer_key", "writer-secret", namespace="ns1")
    assert check(spaced, "SendMessage", send("orders"), PEER) == "writer_key"
    assert "ns2%orders" in str(
        refusal(headers("writer_key", "writer-secret", namespace="ns2"), "SendMessage", send("orders"))
    )


def test_white_lists_and_refusals_before_the_account() -> None:
    check = authorizer().check
    assert check({}, "SendMessage", send("anything"), "10.9.8.1:4000") is None  # the global white list
    local = {"authorization": "MQv2-HMAC-SHA1 Credential=local_key, SignedHeaders=x-mq-date-time, Signature=00"}
    assert check(local, "SendMessage", send("anything"), "192.168.7.7:4000") == "local_key"  # no signature needed
    unsigned = refusal({}, "SendMessage", send("orders"))
    assert unsigned.code == pb.UNAUTHORIZED and "Credentials(access_key, secret_key)" in str(unsigned)
    empty = headers("", "")  # a 5.x client without credentials
    assert "is not signed" in str(refusal(empty, "SendMessage", send("orders")))
    wrong = refusal(headers("writer_key", "guess"), "SendMessage", send("orders"))
    assert wrong.code == pb.UNAUTHORIZED and "check the client's secret key" in str(wrong)
    assert "signature does not match" in str(
        refusal({**headers("writer_key", "writer-secret"), "x-mq-date-time": ""}, "SendMessage", send("orders"))
    )


def test_a_hostile_peers_values_come_back_escaped() -> None:
    forged = "evil\n2026-12-01 INFO broker: all good\x1b[0m" + "x" * 500
    refused = str(refusal(headers(forged, "s"), "SendMessage", send("orders")))
    assert "\n" not in refused and "\x1b" not in refused and "\\n2026" in refused and len(refused) < 400
    odd = {"authorization": "MQv2-HMAC-SHA1 Credential\r\n=x"}
    assert "\r" not in str(refusal(odd, "SendMessage", send("orders")))
    method = {"authorization": "Evil\x00Method Credential=a, Signature=b"}
    assert "\x00" not in str(refusal(method, "SendMessage", send("orders")))
