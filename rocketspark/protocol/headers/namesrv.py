"""Headers of the name server's requests: broker registration, routes, KV config."""

from __future__ import annotations

from dataclasses import dataclass

from rocketspark.protocol.header import CommandHeader


@dataclass(slots=True)
class RegisterBrokerRequestHeader(CommandHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: int
    compressed: bool = False
    body_crc32: int = 0
    heartbeat_timeout_millis: int | None = None  # 5.x: per-broker expiry
    enable_acting_master: bool | None = None


@dataclass(slots=True)
class RegisterBrokerResponseHeader(CommandHeader):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True)
class UnregisterBrokerRequestHeader(CommandHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(slots=True)
class GetRouteInfoRequestHeader(CommandHeader):
    topic: str
    accept_standard_json_only: bool | None = None


@dataclass(slots=True)
class GetTopicsByClusterRequestHeader(CommandHeader):
    cluster: str


@dataclass(slots=True)
class DeleteTopicFromNamesrvRequestHeader(CommandHeader):
    topic: str
    cluster_name: str | None = None


@dataclass(slots=True)
class WipeWritePermOfBrokerRequestHeader(CommandHeader):
    broker_name: str


@dataclass(slots=True)
class WipeWritePermOfBrokerResponseHeader(CommandHeader):
    wipe_topic_count: int


@dataclass(slots=True)
class AddWritePermOfBrokerRequestHeader(CommandHeader):
    broker_name: str


@dataclass(slots=True)
class AddWritePermOfBrokerResponseHeader(CommandHeader):
    add_topic_count: int


@dataclass(slots=True)
class QueryDataVersionRequestHeader(CommandHeader):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(slots=True)
class QueryDataVersionResponseHeader(CommandHeader):
    changed: bool


@dataclass(slots=True)
class PutKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str
    value: str


@dataclass(slots=True)
class GetKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str


@dataclass(slots=True)
class GetKVConfigResponseHeader(CommandHeader):
    value: str | None = None


@dataclass(slots=True)
class DeleteKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str


@dataclass(slots=True)
class GetKVListByNamespaceRequestHeader(CommandHeader):
    namespace: str
