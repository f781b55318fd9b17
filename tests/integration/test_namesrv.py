"""The name server as a subprocess, driven over TCP."""

from __future__ import annotations

import asyncio
import struct

import pytest

from rocketspark.checksum import crc32
from rocketspark.processes import ServerProcess
from rocketspark.protocol.body.kv import KVTable
from rocketspark.protocol.body.register import RegisterBrokerBody
from rocketspark.protocol.body.route import ClusterInfo, TopicRouteData
from rocketspark.protocol.body.topic import DataVersion, TopicConfig, TopicConfigSerializeWrapper, TopicList
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.namesrv import (
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.waiting import eventually


def register_request(
    broker_name: str,
    broker_addr: str,
    topics: dict[str, int],
    *,
    cluster: str = "DefaultCluster",
    broker_id: int = 0,
    counter: int = 1,
    compressed: bool = False,
) -> RemotingCommand:
    body = RegisterBrokerBody(
        TopicConfigSerializeWrapper(
            {t: TopicConfig(t, n, n) for t, n in topics.items()},
            DataVersion(counter, 0, 1_700_000_000_000 + counter),
        )
    ).encode(compressed)
    header = RegisterBrokerRequestHeader(
        broker_name,
        broker_addr,
        cluster,
        broker_addr,
        broker_id,
        compressed=compressed,
        body_crc32=crc32(body),
    )
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body)


async def route(client: RemotingClient, namesrv: str, topic: str) -> RemotingCommand:
    return await client.invoke(
        namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic))
    )


async def test_two_brokers_register_and_routes_by_topic(namesrv: ServerProcess) -> None:
    broker_a, broker_b = RemotingClient(), RemotingClient()
    client = RemotingClient()
    try:
        ok_a = await broker_a.invoke(
            namesrv.address, register_request("broker-a", "127.0.0.1:20911", {"Orders": 4, "OnlyA": 2})
        )
        ok_b = await broker_b.invoke(
            namesrv.address, register_request("broker-b", "127.0.0.1:21911", {"Orders": 8}, compressed=True)
        )
        assert ok_a.code == ok_b.code == ResponseCode.SUCCESS

        response = await route(client, namesrv.address, "Orders")
        assert response.code == ResponseCode.SUCCESS
        data = TopicRouteData.from_json(response.body)
        assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in data.queue_datas] == [
            ("broker-a", 4, 4, 6),
            ("broker-b", 8, 8, 6),
        ]
        assert {b.broker_name: b.broker_addrs for b in data.broker_datas} == {
            "broker-a": {0: "127.0.0.1:20911"},
            "broker-b": {0: "127.0.0.1:21911"},
        }
        assert b'"brokerAddrs":{"0":' in response.body  # standard JSON for every client

        only_a = TopicRouteData.from_json((await route(client, namesrv.address, "OnlyA")).body)
        assert [b.broker_name for b in only_a.broker_datas] == ["broker-a"]

        cluster = ClusterInfo.from_json(
            (await client.invoke(namesrv.address, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))).body
        )
        assert cluster.cluster_addr_table == {"DefaultCluster": ["broker-a", "broker-b"]}
        assert cluster.broker_addr_table["broker-b"].master_address == "127.0.0.1:21911"

        topics = TopicList.from_json(
            (
                await client.invoke(
                    namesrv.address, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
                )
            ).body
        )
        assert topics.topic_list == ["OnlyA", "Orders"]
        by_cluster = await client.invoke(
            namesrv.address,
            RemotingCommand.request(
                RequestCode.GET_TOPICS_BY_CLUSTER, GetTopicsByClusterRequestHeader("DefaultCluster")
            ),
        )
        assert TopicList.from_json(by_cluster.body).topic_list == ["OnlyA", "Orders"]
    finally:
        for c in (broker_a, broker_b, client):
            await c.close()


async def test_unknown_topic(namesrv: ServerProcess, remoting_client: RemotingClient) -> None:
    response = await route(remoting_client, namesrv.address, "NoSuchTopic")
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert "NoSuchTopic" in (response.remark or "")


async def test_crc_mismatch_is_refused(namesrv: ServerProcess, remoting_client: RemotingClient) -> None:
    request = register_request("broker-a", "127.0.0.1:20911", {"T": 1})
    request.ext_fields["bodyCrc32"] = "12345"
    response = await remoting_client.invoke(namesrv.address, request)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == "crc32 not match"
    assert (await route(remoting_client, namesrv.address, "T")).code == ResponseCode.TOPIC_NOT_EXIST


async def test_slave_learns_its_master(namesrv: ServerProcess, remoting_client: RemotingClient) -> None:
    master, slave = RemotingClient(), RemotingClient()
    try:
        await master.invoke(namesrv.address, register_request("broker-a", "127.0.0.1:20911", {"T": 4}))
        answer = await slave.invoke(
            namesrv.address, register_request("broker-a", "127.0.0.1:20921", {"T": 4}, broker_id=1)
        )
        header = answer.decode_header(RegisterBrokerResponseHeader)
        assert header.master_addr == "127.0.0.1:20911"
        data = TopicRouteData.from_json((await route(remoting_client, namesrv.address, "T")).body)
        assert data.broker_datas[0].broker_addrs == {0: "127.0.0.1:20911", 1: "127.0.0.1:20921"}
    finally:
        await master.close()
        await slave.close()


async def test_broker_dropped_when_its_connection_closes(namesrv: ServerProcess) -> None:
    observer = RemotingClient()
    broker = RemotingClient()
    try:
        await broker.invoke(namesrv.address, register_request("broker-a", "127.0.0.1:20911", {"T": 4}))
        assert (await route(observer, namesrv.address, "T")).code == ResponseCode.SUCCESS
        await broker.close()

        async def route_gone() -> bool:
            return (await route(observer, namesrv.address, "T")).code == ResponseCode.TOPIC_NOT_EXIST

        await eventually(route_gone, what="the route to go with the broker's connection")
    finally:
        await observer.close()


async def test_unregister_and_admin_requests(namesrv: ServerProcess, remoting_client: RemotingClient) -> None:
    addr = namesrv.address
    await remoting_client.invoke(addr, register_request("broker-a", "127.0.0.1:20911", {"T": 4, "U": 2}))
    wiped = await remoting_client.invoke(
        addr,
        RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, WipeWritePermOfBrokerRequestHeader("broker-a")),
    )
    assert wiped.decode_header(WipeWritePermOfBrokerResponseHeader).wipe_topic_count == 2
    assert TopicRouteData.from_json((await route(remoting_client, addr, "T")).body).queue_datas[0].perm == 4

    deleted = await remoting_client.invoke(
        addr,
        RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, DeleteTopicFromNamesrvRequestHeader("U")),
    )
    assert deleted.code == ResponseCode.SUCCESS
    assert (await route(remoting_client, addr, "U")).code == ResponseCode.TOPIC_NOT_EXIST

    unregistered = await remoting_client.invoke(
        addr,
        RemotingCommand.request(
            RequestCode.UNREGISTER_BROKER,
            UnregisterBrokerRequestHeader("broker-a", "127.0.0.1:20911", "DefaultCluster", 0),
        ),
    )
    assert unregistered.code == ResponseCode.SUCCESS
    assert (await route(remoting_client, addr, "T")).code == ResponseCode.TOPIC_NOT_EXIST


@pytest.mark.slow
async def test_silent_broker_expires(servers: ServerFactory) -> None:
    namesrv = servers.namesrv("--scan-interval-ms", "200", "--broker-expiry-ms", "800")
    broker, observer = RemotingClient(), RemotingClient()
    try:
        await broker.invoke(namesrv.address, register_request("broker-a", "127.0.0.1:20911", {"T": 4}))
        await broker.invoke(namesrv.address, register_request("broker-b", "127.0.0.1:21911", {"T": 4}))
        # broker-b keeps registering; broker-a stays silent (its connection stays open)
        for counter in range(2, 12):
            await asyncio.sleep(0.2)
            await broker.invoke(
                namesrv.address, register_request("broker-b", "127.0.0.1:21911", {"T": 4}, counter=counter)
            )
        data = TopicRouteData.from_json((await route(observer, namesrv.address, "T")).body)
        assert [b.broker_name for b in data.broker_datas] == ["broker-b"]
    finally:
        await broker.close()
        await observer.close()


async def test_kv_config_round_trip_survives_restart(servers: ServerFactory, tmp_path) -> None:
    data_dir = tmp_path / "ns-data"
    first = servers.namesrv(data_dir=data_dir)
    client = RemotingClient()
    try:
        put = await client.invoke(
            first.address,
            RemotingCommand.request(
                RequestCode.PUT_KV_CONFIG,
                PutKVConfigRequestHeader("ORDER_TOPIC_CONFIG", "Orders", "broker-a:4"),
            ),
        )
        assert put.code == ResponseCode.SUCCESS
        for key in ("k1", "k2"):
            await client.invoke(
                first.address,
                RemotingCommand.request(RequestCode.PUT_KV_CONFIG, PutKVConfigRequestHeader("ns", key, f"v-{key}")),
            )
        await client.invoke(
            first.address,
            RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, DeleteKVConfigRequestHeader("ns", "k2")),
        )
        assert first.stop() == 0

        second = servers.namesrv(data_dir=data_dir)
        got = await client.invoke(
            second.address,
            RemotingCommand.request(RequestCode.GET_KV_CONFIG, GetKVConfigRequestHeader("ns", "k1")),
        )
        assert got.code == ResponseCode.SUCCESS
        assert got.decode_header(GetKVConfigResponseHeader).value == "v-k1"
        gone = await client.invoke(
            second.address,
            RemotingCommand.request(RequestCode.GET_KV_CONFIG, GetKVConfigRequestHeader("ns", "k2")),
        )
        assert gone.code == ResponseCode.QUERY_NOT_FOUND
        # order-topic config reaches brokers in the registration answer, and clients in the route
        registered = await client.invoke(second.address, register_request("broker-a", "127.0.0.1:20911", {"Orders": 4}))
        assert KVTable.from_json(registered.body).table == {"Orders": "broker-a:4"}
        assert (
            TopicRouteData.from_json((await route(client, second.address, "Orders")).body).order_topic_conf
            == "broker-a:4"
        )
    finally:
        await client.close()


async def test_malformed_and_oversized_frames_disturb_no_one(namesrv: ServerProcess) -> None:
    client = RemotingClient()
    try:
        await client.invoke(namesrv.address, register_request("broker-a", "127.0.0.1:20911", {"T": 4}))
        host, port = namesrv.address.split(":")
        for garbage in (
            struct.pack(">ii", 13, 9) + b"{not json",
            struct.pack(">i", 64 * 1024 * 1024) + b"\x00" * 16,
            b"\x00\x00",  # then hang up mid-frame
        ):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(garbage)
            if len(garbage) > 2:
                assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
        response = await route(client, namesrv.address, "T")
        assert response.code == ResponseCode.SUCCESS  # same connection, same registration
        assert namesrv.running()
    finally:
        await client.close()


async def test_sigterm_exits_cleanly(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    assert namesrv.stop() == 0
