"""Request processors of the name server: decode the typed header, call a manager, answer."""

from __future__ import annotations

import logging

from namesrv.kvconfig_manager import KVConfigManager
from namesrv.route_info_manager import RouteInfoManager
from rocketspark.checksum import crc32
from rocketspark.protocol.body.kv import KVTable
from rocketspark.protocol.body.register import RegisterBrokerBody
from rocketspark.protocol.body.topic import DataVersion, TopicConfigSerializeWrapper, TopicList
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.namesrv import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable

log = logging.getLogger(__name__)

ORDER_TOPIC_CONFIG_NAMESPACE = "ORDER_TOPIC_CONFIG"
# Brokers older than V3_0_11 sent a bare TopicConfigSerializeWrapper instead of RegisterBrokerBody.
_V3_0_11 = 37


class NamesrvProcessor:
    """Handles every request code the name server serves (Java's `DefaultRequestProcessor`)."""

    def __init__(self, routes: RouteInfoManager, kv_config: KVConfigManager, address: str) -> None:
        self.routes = routes
        self.kv_config = kv_config
        self.address = address

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.REGISTER_BROKER, self.register_broker)
        table.register(RequestCode.UNREGISTER_BROKER, self.unregister_broker)
        table.register(RequestCode.QUERY_DATA_VERSION, self.query_data_version)
        table.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.get_route_info)
        table.register(RequestCode.GET_BROKER_CLUSTER_INFO, self.get_cluster_info)
        table.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.get_all_topics)
        table.register(RequestCode.GET_TOPICS_BY_CLUSTER, self.get_topics_by_cluster)
        table.register(RequestCode.DELETE_TOPIC_IN_NAMESRV, self.delete_topic)
        table.register(RequestCode.WIPE_WRITE_PERM_OF_BROKER, self.wipe_write_perm)
        table.register(RequestCode.ADD_WRITE_PERM_OF_BROKER, self.add_write_perm)
        table.register(RequestCode.PUT_KV_CONFIG, self.put_kv_config)
        table.register(RequestCode.GET_KV_CONFIG, self.get_kv_config)
        table.register(RequestCode.DELETE_KV_CONFIG, self.delete_kv_config)
        table.register(RequestCode.GET_KVLIST_BY_NAMESPACE, self.get_kv_list)

    # -- brokers -----------------------------------------------------------------------------

    def register_broker(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(RegisterBrokerRequestHeader)
        if header.body_crc32 != 0 and crc32(request.body) != header.body_crc32:
            log.warning("registration of %s refused: body crc32 does not match", header.broker_addr)
            return request.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        wrapper: TopicConfigSerializeWrapper | None = None
        filter_servers: list[str] = []
        if request.body:
            try:
                if request.version >= _V3_0_11:
                    body = RegisterBrokerBody.decode(request.body, header.compressed)
                    wrapper, filter_servers = body.topic_config_serialize_wrapper, body.filter_server_list
                else:
                    wrapper = TopicConfigSerializeWrapper.from_json(request.body)
            except ValueError as exc:
                return request.response(ResponseCode.SYSTEM_ERROR, f"undecodable registration body: {exc}")
        result = self.routes.register_broker(
            cluster=header.cluster_name,
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
            ha_server_addr=header.ha_server_addr,
            topic_config_wrapper=wrapper,
            filter_server_list=filter_servers,
            channel=connection,
            timeout_ms=header.heartbeat_timeout_millis,
        )
        order_config = self.kv_config.namespace(ORDER_TOPIC_CONFIG_NAMESPACE)
        return request.response(
            header=RegisterBrokerResponseHeader(result.ha_server_addr, result.master_addr),
            body=KVTable(order_config).to_json() if order_config else b"",
        )

    def unregister_broker(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(UnregisterBrokerRequestHeader)
        self.routes.unregister_broker(header.cluster_name, header.broker_addr, header.broker_name, header.broker_id)
        return request.response()

    def query_data_version(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(QueryDataVersionRequestHeader)
        current = self.routes.query_data_version(header.cluster_name, header.broker_addr)
        reported = DataVersion.from_json(request.body) if request.body else None
        changed = current is None or reported != current
        return request.response(
            header=QueryDataVersionResponseHeader(changed),
            body=current.to_json() if current is not None else b"",
        )

    # -- routes ------------------------------------------------------------------------------

    def get_route_info(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(GetRouteInfoRequestHeader)
        route = self.routes.pickup_topic_route_data(header.topic)
        if route is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server {self.address} for the topic: {header.topic}",
            )
        route.order_topic_conf = self.kv_config.get(ORDER_TOPIC_CONFIG_NAMESPACE, header.topic)
        # Always standard JSON (string map keys), which every client version parses.
        return request.response(body=route.to_json())

    def get_cluster_info(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self.routes.cluster_info().to_json())

    def get_all_topics(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=TopicList(self.routes.all_topics()).to_json())

    def get_topics_by_cluster(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(GetTopicsByClusterRequestHeader)
        return request.response(body=TopicList(self.routes.topics_by_cluster(header.cluster)).to_json())

    def delete_topic(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(DeleteTopicFromNamesrvRequestHeader)
        self.routes.delete_topic(header.topic, header.cluster_name)
        return request.response()

    def wipe_write_perm(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(WipeWritePermOfBrokerRequestHeader)
        count = self.routes.wipe_write_perm(header.broker_name)
        log.info("write permission of broker %s wiped on %d topics", header.broker_name, count)
        return request.response(header=WipeWritePermOfBrokerResponseHeader(count))

    def add_write_perm(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(AddWritePermOfBrokerRequestHeader)
        count = self.routes.add_write_perm(header.broker_name)
        log.info("write permission of broker %s restored on %d topics", header.broker_name, count)
        return request.response(header=AddWritePermOfBrokerResponseHeader(count))

    # -- KV config ---------------------------------------------------------------------------

    async def put_kv_config(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(PutKVConfigRequestHeader)
        self.kv_config.put(header.namespace, header.key, header.value)
        await self.kv_config.writer.flush()  # acknowledged only once on disk
        return request.response()

    def get_kv_config(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(GetKVConfigRequestHeader)
        value = self.kv_config.get(header.namespace, header.key)
        if value is None:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {header.namespace} Key: {header.key}",
            )
        return request.response(header=GetKVConfigResponseHeader(value))

    async def delete_kv_config(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(DeleteKVConfigRequestHeader)
        self.kv_config.delete(header.namespace, header.key)
        await self.kv_config.writer.flush()
        return request.response()

    def get_kv_list(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(GetKVListByNamespaceRequestHeader)
        table = self.kv_config.namespace(header.namespace)
        if table is None:
            return request.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {header.namespace}")
        return request.response(body=KVTable(table).to_json())
