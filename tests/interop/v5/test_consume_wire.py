"""The consumption RPCs' answers on the wire, asked with a gRPC client of our own (the broker's generated
classes): the order of a ReceiveMessage stream (status, messages, delivery_timestamp), the system
properties of a received message, refusals as statuses, AckMessage's per-entry results, QueryAssignment."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from broker.grpc.v2 import definition_pb2 as pb
from broker.grpc.v2 import service_pb2 as service
from broker.grpc.v2.service_pb2_grpc import MessagingServiceStub
from broker.pop.errors import Refusal
from rocketspark.client.api import admin
from tests.integration.broker_client import send
from tests.interop.v5.conftest import Grpc5Cluster
from tests.interop.v5.test_grpc_wire import headers

pytestmark = pytest.mark.interop


@pytest.fixture
async def stub(shared_grpc_cluster: Grpc5Cluster) -> AsyncIterator[MessagingServiceStub]:
    async with grpc.aio.insecure_channel(shared_grpc_cluster.endpoint) as channel:
        yield MessagingServiceStub(channel)


def receive_request(
    topic: str, group: str, *, filter_type: pb.FilterType = pb.TAG, expression: str = "*", invisible_s: int = 30
) -> service.ReceiveMessageRequest:
    request = service.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=3),  # any queue id: all are read
        filter_expression=pb.FilterExpression(type=filter_type, expression=expression),
        batch_size=8,
    )
    request.invisible_duration.FromSeconds(invisible_s)
    request.long_polling_timeout.FromSeconds(1)
    return request


async def received(stub: MessagingServiceStub, request: service.ReceiveMessageRequest) -> list[str]:
    """The kinds of the stream's items, in order, with each status's code name and each message's body."""
    items = []
    async for item in stub.ReceiveMessage(request, metadata=headers(), timeout=10):
        kind = item.WhichOneof("content")
        if kind == "status":
            items.append(pb.Code.Name(item.status.code))
        elif kind == "message":
            items.append(item.message.body.decode())
        else:
            items.append(kind)
    return items


def test_every_refusal_is_a_v2_code() -> None:
    assert {refusal.value for refusal in Refusal} <= set(pb.Code.keys())


async def test_a_receive_stream_and_the_acks(shared_grpc_cluster: Grpc5Cluster, stub: MessagingServiceStub) -> None:
    for i in range(3):
        await send(
            shared_grpc_cluster.remoting, shared_grpc_cluster.broker.address, "wire_pop", f"w{i}".encode(), tags="t"
        )
    request = receive_request("wire_pop", "wire_poppers")
    stream = [item async for item in stub.ReceiveMessage(request, metadata=headers(), timeout=10)]
    assert [item.WhichOneof("content") for item in stream] == [
        "status",
        "message",
        "message",
        "message",
        "delivery_timestamp",
    ]
    assert stream[0].status.code == pb.OK
    messages = [item.message for item in stream[1:4]]
    assert sorted(m.body for m in messages) == [b"w0", b"w1", b"w2"]
    for message in messages:
        system = message.system_properties
        assert system.receipt_handle and system.delivery_attempt == 1
        assert system.invisible_duration.ToSeconds() == 30
        assert system.tag == "t" and system.queue_id == 0
        assert message.topic.name == "wire_pop"
    assert await received(stub, request) == ["MESSAGE_NOT_FOUND", "delivery_timestamp"]

    ack = service.AckMessageRequest(
        group=pb.Resource(name="wire_poppers"),
        topic=pb.Resource(name="wire_pop"),
        entries=[
            service.AckMessageEntry(
                message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
            )
            for m in messages[:2]
        ]
        + [service.AckMessageEntry(message_id="x", receipt_handle="not a handle")],
    )
    answer = await stub.AckMessage(ack, metadata=headers(), timeout=10)
    assert answer.status.code == pb.MULTIPLE_RESULTS
    assert [pb.Code.Name(e.status.code) for e in answer.entries] == ["OK", "OK", "INVALID_RECEIPT_HANDLE"]
    empty = await stub.AckMessage(
        service.AckMessageRequest(group=ack.group, topic=ack.topic), metadata=headers(), timeout=10
    )
    assert empty.status.code == pb.BAD_REQUEST

    change = service.ChangeInvisibleDurationRequest(
        group=ack.group, topic=ack.topic, receipt_handle=messages[2].system_properties.receipt_handle
    )
    change.invisible_duration.FromSeconds(60)
    changed = await stub.ChangeInvisibleDuration(change, metadata=headers(), timeout=10)
    assert changed.status.code == pb.OK and changed.receipt_handle not in ("", change.receipt_handle)
    stale = await stub.ChangeInvisibleDuration(change, metadata=headers(), timeout=10)
    assert stale.status.code == pb.INVALID_RECEIPT_HANDLE and "stale" in stale.status.message
    forward = service.ForwardMessageToDeadLetterQueueRequest(
        group=ack.group, topic=ack.topic, receipt_handle=changed.receipt_handle, delivery_attempt=1
    )
    assert (await stub.ForwardMessageToDeadLetterQueue(forward, metadata=headers(), timeout=10)).status.code == pb.OK
    [dead] = await shared_grpc_cluster.pull_queue("%DLQ%wire_poppers", 0)
    assert dead.body == b"w2"

    # refused receives still end with a delivery_timestamp (the Python push consumer needs it)
    sql = receive_request("wire_pop", "wire_poppers", filter_type=pb.SQL, expression="a >")
    assert await received(stub, sql) == ["ILLEGAL_FILTER_EXPRESSION", "delivery_timestamp"]
    too_short = receive_request("wire_pop", "wire_poppers", invisible_s=0)
    assert await received(stub, too_short) == ["ILLEGAL_INVISIBLE_TIME", "delivery_timestamp"]
    unknown = receive_request("wire_nowhere", "wire_poppers")
    assert await received(stub, unknown) == ["TOPIC_NOT_FOUND", "delivery_timestamp"]


async def test_assignments_are_the_broker_or_its_queues(
    shared_grpc_cluster: Grpc5Cluster, stub: MessagingServiceStub
) -> None:
    await send(shared_grpc_cluster.remoting, shared_grpc_cluster.broker.address, "wire_assigned", b"x")
    await admin.create_subscription_group(
        shared_grpc_cluster.remoting, shared_grpc_cluster.broker.address, "wire_orderly", consume_message_orderly=True
    )

    async def assigned(group: str) -> list[int]:
        request = service.QueryAssignmentRequest(topic=pb.Resource(name="wire_assigned"), group=pb.Resource(name=group))
        answer = await stub.QueryAssignment(request, metadata=headers(), timeout=10)
        assert answer.status.code == pb.OK
        host, port = shared_grpc_cluster.endpoint.rsplit(":", 1)
        for assignment in answer.assignments:
            broker = assignment.message_queue.broker
            assert (broker.name, broker.id) == ("broker-a", 0)
            assert [(a.host, a.port) for a in broker.endpoints.addresses] == [(host, int(port))]
            assert assignment.message_queue.permission == pb.READ_WRITE
        return [assignment.message_queue.id for assignment in answer.assignments]

    assert await assigned("wire_concurrent") == [-1]
    assert await assigned("wire_orderly") == [0, 1, 2, 3]
