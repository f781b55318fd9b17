"""QueryRoute: a topic's queues on this broker, with the broker's own gRPC endpoint as their address.

A 5.x client sends QueryRoute to the access point it was given and everything else to the endpoints
the route names: here always this broker (Apache's proxy in local mode names itself the same way),
as broker id 0 (the master). Queue `i` is readable when `i < readQueueNums` and the topic's perm
allows reads, writable likewise: so a 5.x producer writes the queues a 4.x producer writes and a 5.x
consumer reads the queues a 4.x consumer reads. A topic accepts every message type, or only the one
its `message.type` attribute names (Apache 5's topic attribute: NORMAL, FIFO, DELAY, TRANSACTION,
MIXED). A topic that does not exist is created from TBW102 when autoCreateTopicEnable allows, as a
4.x producer's first send creates it.
"""

from __future__ import annotations

import ipaddress
from typing import Protocol

from broker.context import HasConfig, HasTopics
from broker.grpc.call import Call
from broker.grpc.status import ok
from broker.grpc.v2 import definition_pb2 as pb
from broker.grpc.v2 import service_pb2 as service
from rocketspark.protocol.body.topic import Perm, TopicConfig

DEFAULT_TOPIC = "TBW102"
#: Apache 5's topic attribute naming the one message type a topic takes
MESSAGE_TYPE_ATTRIBUTE = "message.type"
ALL_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
_TYPES = {"NORMAL": (pb.NORMAL,), "FIFO": (pb.FIFO,), "DELAY": (pb.DELAY,), "TRANSACTION": (pb.TRANSACTION,)}


class RouteContext(HasConfig, HasTopics, Protocol):
    """What QueryRoute reads of the broker."""


def endpoints(host: str, port: int) -> pb.Endpoints:
    """The Endpoints naming `host:port` (IPv4, IPv6 or a domain name)."""
    try:
        scheme = pb.IPv4 if ipaddress.ip_address(host).version == 4 else pb.IPv6
    except ValueError:
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def accepted_types(topic: TopicConfig) -> tuple[pb.MessageType, ...]:
    """The message types a topic takes (every one unless its `message.type` attribute names one)."""
    value = topic.attributes.get(MESSAGE_TYPE_ATTRIBUTE) or topic.attributes.get("+" + MESSAGE_TYPE_ATTRIBUTE)
    return _TYPES.get((value or "").upper(), ALL_TYPES)


def permission(topic: TopicConfig, queue_id: int) -> pb.Permission:
    readable = queue_id < topic.read_queue_nums and bool(topic.perm & Perm.READ)
    writable = queue_id < topic.write_queue_nums and bool(topic.perm & Perm.WRITE)
    if readable and writable:
        return pb.READ_WRITE
    if readable:
        return pb.READ
    return pb.WRITE if writable else pb.NONE


class Routes:
    def __init__(self, broker: RouteContext, advertised: pb.Endpoints) -> None:
        """`advertised`: the endpoint the broker serves gRPC at, as clients reach it (brokerIP1)."""
        self._broker = broker
        self.advertised = advertised

    def topic_config(self, topic: str) -> TopicConfig:
        """The topic's config, created from TBW102 when allowed (else TOPIC_NOT_EXIST, naming the fix)."""
        config = self._broker.config
        return self._broker.topics.create_in_send(topic, DEFAULT_TOPIC, config.default_topic_queue_nums)

    def query_route(self, request: service.QueryRouteRequest, call: Call) -> service.QueryRouteResponse:
        topic = self.topic_config(call.topic(request.topic))
        broker = pb.Broker(name=self._broker.config.broker_name, id=0, endpoints=self.advertised)
        types = accepted_types(topic)
        queues = [
            pb.MessageQueue(
                topic=request.topic,
                id=queue_id,
                permission=permission(topic, queue_id),
                broker=broker,
                accept_message_types=types,
            )
            for queue_id in range(max(topic.read_queue_nums, topic.write_queue_nums))
        ]
        return service.QueryRouteResponse(status=ok(), message_queues=queues)
