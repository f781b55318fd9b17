"""The 5.x endpoint's answers as bytes on the wire: QueryRoute, Telemetry settings, Heartbeat, refusals.

A gRPC client of its own (grpc.aio with the broker's generated classes) asks what the official clients
read but do not show: the route's queues and endpoint, the settings' numbers, the status codes of
refusals. The official client's own tests are beside this one.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from broker.grpc.messages import timestamp
from broker.grpc.v2 import definition_pb2 as pb
from broker.grpc.v2 import service_pb2 as service
from broker.grpc.v2.service_pb2_grpc import MessagingServiceStub
from rocketspark.client.api.client_manage import get_consumer_list
from tests.harness import ServerFactory
from tests.interop.v5.conftest import Grpc5Cluster
from tests.interop.v5.servers import grpc_broker
from tests.waiting import eventually

CLIENT_ID = "wire-test@1"


@pytest.fixture
def grpc_cluster(shared_grpc_cluster: Grpc5Cluster) -> Grpc5Cluster:
    """One broker for the module's tests (each uses topics and groups of its own)."""
    return shared_grpc_cluster


def headers(client_id: str = CLIENT_ID) -> list[tuple[str, str]]:
    return [("x-mq-client-id", client_id), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2")]


@pytest.fixture
async def stub(grpc_cluster: Grpc5Cluster) -> AsyncIterator[MessagingServiceStub]:
    async with grpc.aio.insecure_channel(grpc_cluster.endpoint) as channel:
        yield MessagingServiceStub(channel)


async def settings_answer(stub: MessagingServiceStub, settings: pb.Settings) -> service.TelemetryCommand:
    """Open a Telemetry stream, send `settings`, return the first command the broker answers."""
    call = stub.Telemetry(metadata=headers())
    await call.write(service.TelemetryCommand(settings=settings))
    answer = await call.read()
    await call.done_writing()
    call.cancel()
    assert isinstance(answer, service.TelemetryCommand)
    return answer


async def test_route_names_the_broker_itself(grpc_cluster: Grpc5Cluster, stub: MessagingServiceStub) -> None:
    route = await stub.QueryRoute(
        service.QueryRouteRequest(topic=pb.Resource(name="wire_topic")), metadata=headers(), timeout=10
    )
    assert route.status.code == pb.OK
    assert [queue.id for queue in route.message_queues] == list(range(8))  # created from TBW102
    host, port = grpc_cluster.endpoint.rsplit(":", 1)
    for queue in route.message_queues:
        assert queue.topic.name == "wire_topic"
        assert queue.permission == pb.READ_WRITE
        assert queue.broker.id == 0
        assert queue.broker.name == "broker-a"
        assert queue.broker.endpoints.scheme == pb.IPv4
        assert [(a.host, a.port) for a in queue.broker.endpoints.addresses] == [(host, int(port))]
        assert list(queue.accept_message_types) == [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]


async def test_settings_answered_for_producers_and_consumers(
    grpc_cluster: Grpc5Cluster, stub: MessagingServiceStub
) -> None:
    producer = await settings_answer(stub, pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing()))
    assert producer.status.code == pb.OK
    assert producer.settings.publishing.max_body_size == 4 * 1024 * 1024  # maxMessageSize
    assert producer.settings.publishing.validate_message_type
    backoff = producer.settings.backoff_policy
    assert backoff.max_attempts == 3
    assert backoff.WhichOneof("strategy") == "exponential_backoff"
    assert backoff.exponential_backoff.initial.ToMilliseconds() == 10
    assert backoff.exponential_backoff.max.ToMilliseconds() == 1000
    assert backoff.exponential_backoff.multiplier == 2.0

    subscription = pb.Subscription(
        group=pb.Resource(name="wire_group"),
        subscriptions=[
            pb.SubscriptionEntry(
                topic=pb.Resource(name="wire_topic"), expression=pb.FilterExpression(type=pb.TAG, expression="a || b")
            )
        ],
    )
    consumer = await settings_answer(stub, pb.Settings(client_type=pb.PUSH_CONSUMER, subscription=subscription))
    assert consumer.status.code == pb.OK
    answered = consumer.settings.subscription
    assert answered.HasField("fifo") and not answered.fifo
    assert answered.receive_batch_size == 32
    assert answered.long_polling_timeout.ToMilliseconds() == 20_000
    retry = consumer.settings.backoff_policy
    assert retry.max_attempts == 17  # retryMaxTimes 16 + 1
    assert [d.ToMilliseconds() for d in retry.customized_backoff.next][:3] == [10_000, 30_000, 60_000]
    # the settings registered the consumer in the broker's consumer manager, as a 4.x heartbeat does
    members = await eventually(
        lambda: get_consumer_list(grpc_cluster.remoting, grpc_cluster.broker.address, "wire_group"),
        timeout_s=10,
        what="wire_group's members",
    )
    assert members == [CLIENT_ID]
    sql = pb.Subscription(
        group=pb.Resource(name="wire_sql_group"),
        subscriptions=[
            pb.SubscriptionEntry(
                topic=pb.Resource(name="wire_topic"), expression=pb.FilterExpression(type=pb.SQL, expression="a > 1")
            )
        ],
    )
    sql_consumer = await settings_answer(stub, pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=sql))
    assert sql_consumer.status.code == pb.OK  # registered with its SQL92 subscription, as a tag one


async def test_refusals_are_statuses(grpc_cluster: Grpc5Cluster, stub: MessagingServiceStub) -> None:
    no_id = await stub.Heartbeat(service.HeartbeatRequest(client_type=pb.PRODUCER), metadata=[], timeout=10)
    assert no_id.status.code == pb.CLIENT_ID_REQUIRED
    assert "x-mq-client-id" in no_id.status.message
    unknown = await stub.Heartbeat(
        service.HeartbeatRequest(client_type=pb.PRODUCER), metadata=headers("never-sent-settings"), timeout=10
    )
    assert unknown.status.code == pb.UNRECOGNIZED_CLIENT_TYPE
    assert "Telemetry" in unknown.status.message
    bad_topic = await stub.QueryRoute(
        service.QueryRouteRequest(topic=pb.Resource(name="no spaces")), metadata=headers(), timeout=10
    )
    assert bad_topic.status.code == pb.ILLEGAL_TOPIC
    message = pb.Message(
        topic=pb.Resource(name="wire_topic"),
        body=b"x",
        user_properties={"UNIQ_KEY": "mine"},
        system_properties=pb.SystemProperties(message_id="m1", message_type=pb.NORMAL),
    )
    reserved = await stub.SendMessage(service.SendMessageRequest(messages=[message]), metadata=headers(), timeout=10)
    assert reserved.status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    assert reserved.entries[0].status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    big = pb.Message(
        topic=pb.Resource(name="wire_topic"),
        body=b"x" * (4 * 1024 * 1024 + 1),
        system_properties=pb.SystemProperties(message_id="m2", message_type=pb.NORMAL),
    )
    too_large = await stub.SendMessage(service.SendMessageRequest(messages=[big]), metadata=headers(), timeout=10)
    assert too_large.status.code == pb.MESSAGE_BODY_TOO_LARGE
    assert "maxMessageSize" in too_large.status.message
    fifo_without_group = pb.Message(
        topic=pb.Resource(name="wire_topic"),
        body=b"x",
        system_properties=pb.SystemProperties(message_id="m3", message_type=pb.FIFO),
    )
    conflict = await stub.SendMessage(
        service.SendMessageRequest(messages=[fifo_without_group]), metadata=headers(), timeout=10
    )
    assert conflict.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    too_far = pb.Message(
        topic=pb.Resource(name="wire_topic"),
        body=b"x",
        system_properties=pb.SystemProperties(
            message_id="m5", message_type=pb.DELAY, delivery_timestamp=timestamp(int(time.time() * 1000) + 10**10)
        ),
    )
    late = await stub.SendMessage(service.SendMessageRequest(messages=[too_far]), metadata=headers(), timeout=10)
    assert late.status.code == pb.ILLEGAL_DELIVERY_TIME
    assert "timerMaxDelaySec" in late.status.message
    not_served = await stub.GetOffset(service.GetOffsetRequest(), metadata=headers(), timeout=10)
    assert not_served.status.code == pb.NOT_IMPLEMENTED
    end = await stub.EndTransaction(
        service.EndTransactionRequest(
            topic=pb.Resource(name="wire_topic"), message_id="m4", transaction_id="nonsense", resolution=pb.COMMIT
        ),
        metadata=headers(),
        timeout=10,
    )
    assert end.status.code == pb.INVALID_TRANSACTION_ID


async def test_missing_topic_without_auto_create(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    _, endpoint = grpc_broker(servers, namesrv.address, "--set", "autoCreateTopicEnable=false")
    async with grpc.aio.insecure_channel(endpoint) as channel:
        route = await MessagingServiceStub(channel).QueryRoute(
            service.QueryRouteRequest(topic=pb.Resource(name="never_created")), metadata=headers(), timeout=10
        )
    assert route.status.code == pb.TOPIC_NOT_FOUND
    assert "autoCreateTopicEnable=false" in route.status.message


def test_a_taken_grpc_port_stops_the_start_with_the_fix(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "broker", "--port", "0", "--grpc-port", str(port), "--data-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "set grpcServerPort (rocketspark dev: --grpc-port) to a free port, or to 0" in done.stderr
