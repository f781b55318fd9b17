"""The 5.x endpoint's pure parts: message mapping both ways, namespaced names, transaction ids, queue
permissions (broker/grpc/messages.py, call.py, transactions.py, routes.py)."""

from __future__ import annotations

import hashlib
import zlib

import pytest

from broker.grpc.call import qualified, resource
from broker.grpc.messages import message_of, outgoing, timestamp
from broker.grpc.routes import accepted_types, permission
from broker.grpc.status import StatusError
from broker.grpc.transactions import half_message_of, transaction_id
from broker.grpc.v2 import definition_pb2 as pb
from rocketspark.message import sysflag
from rocketspark.message.properties import codec as props
from rocketspark.protocol.body.topic import Perm, TopicConfig


def sent(**system: object) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name="t"),
        body=b"payload",
        user_properties={"color": "red"},
        system_properties=pb.SystemProperties(message_id="ID1", **system),  # type: ignore[arg-type]
    )


def test_outgoing_maps_system_properties_to_4x_properties() -> None:
    message = sent(
        tag="TagA",
        keys=["k1", "k2"],
        message_type=pb.FIFO,
        message_group="g1",
        born_timestamp=timestamp(1_700_000_000_123),
    )
    mapped = outgoing(message, "t", 4 * 1024 * 1024)
    assert mapped.properties == {
        "color": "red",
        props.TAGS: "TagA",
        props.KEYS: "k1 k2",
        props.UNIQ_KEY: "ID1",
        props.SHARDING_KEY: "g1",
    }
    assert (mapped.sys_flag, mapped.born_timestamp, mapped.body) == (0, 1_700_000_000_123, b"payload")
    delayed = outgoing(sent(message_type=pb.DELAY, delivery_timestamp=timestamp(1_800_000_000_500)), "t", 1 << 20)
    assert delayed.properties[props.TIMER_DELIVER_MS] == "1800000000500"
    half = outgoing(sent(message_type=pb.TRANSACTION), "t", 1 << 20)
    assert half.sys_flag == sysflag.TRANSACTION_PREPARED_TYPE
    assert (half.properties[props.TRANSACTION_PREPARED], half.properties[props.PRODUCER_GROUP]) == ("true", "t")


@pytest.mark.parametrize(
    ("system", "code"),
    [
        ({"message_type": pb.FIFO}, pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ({"message_type": pb.TRANSACTION, "message_group": "g"}, pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ({"message_type": pb.LITE}, pb.UNSUPPORTED),
        ({"message_type": pb.NORMAL, "tag": "a|b"}, pb.ILLEGAL_MESSAGE_TAG),
        ({"message_type": pb.NORMAL, "keys": [" "]}, pb.ILLEGAL_MESSAGE_KEY),
        ({"message_type": pb.NORMAL, "message_group": "bad\ngroup"}, pb.ILLEGAL_MESSAGE_GROUP),
    ],
)
def test_outgoing_refusals(system: dict[str, object], code: int) -> None:
    with pytest.raises(StatusError) as refused:
        outgoing(sent(**system), "t", 1 << 20)
    assert refused.value.code == code


def test_outgoing_refuses_reserved_and_oversized() -> None:
    reserved = sent(message_type=pb.NORMAL)
    reserved.user_properties["DELAY"] = "3"
    with pytest.raises(StatusError, match="used by RocketMQ"):
        outgoing(reserved, "t", 1 << 20)
    with pytest.raises(StatusError, match="maxMessageSize") as too_large:
        outgoing(sent(message_type=pb.NORMAL), "t", 3)
    assert too_large.value.code == pb.MESSAGE_BODY_TOO_LARGE


def test_message_of_a_stored_row() -> None:
    properties = {props.TAGS: "TagA", props.KEYS: "k1 k2", props.UNIQ_KEY: "ID1", props.SHARDING_KEY: "g", "x": "y"}
    row = {
        "topic": "ns%t",
        "queue_id": 3,
        "queue_offset": 42,
        "commit_log_offset": 1000,
        "msg_id": "ID1",
        "tags": "TagA",
        "keys": "k1 k2",
        "body": zlib.compress(b"hello"),
        "flag": 0,
        "sys_flag": sysflag.COMPRESSED,
        "born_timestamp": 1_700_000_000_000,
        "born_host": "10.0.0.1:5000",
        "store_timestamp": 1_700_000_000_100,
        "reconsume_times": 0,
        "properties": props.encode_properties(properties),
    }
    message = message_of(row, store_host="127.0.0.1:10911", namespace="ns", receipt_handle="RH", delivery_attempt=2)
    assert (message.topic.resource_namespace, message.topic.name) == ("ns", "t")
    assert message.body == b"hello"
    assert dict(message.user_properties) == {"x": "y"}
    system = message.system_properties
    assert (system.message_id, system.tag, list(system.keys), system.message_group) == (
        "ID1",
        "TagA",
        ["k1", "k2"],
        "g",
    )
    assert system.message_type == pb.FIFO
    assert system.body_digest.type == pb.MD5
    assert system.body_digest.checksum == hashlib.md5(b"hello").hexdigest().upper()
    assert (system.queue_id, system.queue_offset, system.born_host) == (3, 42, "10.0.0.1")
    assert (system.receipt_handle, system.delivery_attempt) == ("RH", 2)
    assert system.store_timestamp.ToMilliseconds() == 1_700_000_000_100


def test_namespaced_names() -> None:
    assert qualified(pb.Resource(name="t")) == "t"
    assert qualified(pb.Resource(resource_namespace="ns", name="t")) == "ns%t"
    assert qualified(pb.Resource(name="t"), "ns") == "ns%t"
    assert qualified(pb.Resource(resource_namespace="ns", name="ns%t")) == "ns%t"
    assert resource("ns%t", "ns") == pb.Resource(resource_namespace="ns", name="t")


def test_transaction_ids_name_the_half_message() -> None:
    value = transaction_id("127.0.0.1:10911", 123_456, 7)
    assert half_message_of(value) == (123_456, 7)
    with pytest.raises(StatusError) as refused:
        half_message_of("not-a-transaction-id")
    assert refused.value.code == pb.INVALID_TRANSACTION_ID


def test_queue_permissions_and_types() -> None:
    topic = TopicConfig("t", read_queue_nums=4, write_queue_nums=2, perm=Perm.READ | Perm.WRITE)
    assert [permission(topic, i) for i in range(4)] == [pb.READ_WRITE, pb.READ_WRITE, pb.READ, pb.READ]
    read_only = TopicConfig("t", 2, 2, perm=Perm.READ)
    assert permission(read_only, 0) == pb.READ
    assert accepted_types(topic) == (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
    fifo = TopicConfig("t", 2, 2, attributes={"+message.type": "FIFO"})
    assert accepted_types(fifo) == (pb.FIFO,)
