"""The admin requests the dashboard reads, answered by the bundled broker as Apache RocketMQ 4.9
answers them (both flavors): runtime figures, VIEW_BROKER_STATS_DATA, GET_CONSUMER_CONNECTION_LIST
and INVOKE_BROKER_TO_RESET_OFFSET, through the client's RPCs (rocketspark.client.api.admin)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator

import pytest

from broker.stats_items import TOPIC_PUT_NUMS, RateSampler, Sampling, StatsItemSet
from rocketspark.client.api import admin
from rocketspark.client.api.client_manage import send_heartbeat
from rocketspark.client.api.offset import query_consumer_offset, update_consumer_offset
from rocketspark.errors import ServerSystemError
from rocketspark.processes import ServerProcess
from rocketspark.protocol.body.heartbeat import ConsumerData, HeartbeatData, SubscriptionData
from rocketspark.protocol.body.stats import ResetOffsetBody
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.admin import ResetOffsetRequestHeader
from rocketspark.remoting.client import RemotingClient
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable
from tests.harness import ServerFactory
from tests.integration.broker_client import send
from tests.waiting import eventually


@pytest.fixture(scope="module", params=["rocketspark", "apache"])
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    factory = ServerFactory(tmp_path_factory.mktemp("admin"))
    try:
        namesrv = factory.namesrv()
        process = factory.broker(namesrv.address, "--set", f"flavor={request.param}")
        process.flavor = request.param  # type: ignore[attr-defined]
        yield process
    finally:
        factory.stop_all()


@pytest.fixture
def client(remoting_client: RemotingClient) -> RemotingClient:
    return remoting_client


async def test_runtime_info_has_apaches_figures(broker: ServerProcess, client: RemotingClient) -> None:
    before = int((await admin.get_runtime_info(client, broker.address))["msgPutTotalTodayNow"])
    for i in range(3):
        await send(client, broker.address, "RuntimeFigures", f"m{i}".encode())
    info = await admin.get_runtime_info(client, broker.address)
    assert int(info["msgPutTotalTodayNow"]) == before + 3
    assert int(info["msgGetTotalTodayNow"]) >= 0
    assert re.fullmatch(r"\[ \d+ days, \d+ hours, \d+ minutes, \d+ seconds \]", info["runtime"])
    assert 0 < int(info["bootTimestamp"]) <= time.time() * 1000
    assert 0.0 <= float(info["commitLogDiskRatio"]) <= 1.0
    assert 0.0 <= float(info["consumeQueueDiskRatio"]) <= 1.0
    assert re.fullmatch(r"Total : [\d.]+ [KMGTPE]iB, Free : [\d.]+ [KMGTPE]?i?B\.", info["commitLogDirCapacity"])
    for key in ("putTps", "getTransferedTps"):  # "10 s, 60 s, 600 s": empty until sampled long enough
        assert len(info[key].split(" ")) == 3, info[key]


def test_rates_are_apaches_putTps() -> None:
    total = 0
    rate = RateSampler(lambda: total)
    for second in range(12):
        total = 5 * second
        rate.sample(1_000_000 + second * 1000)
    ten_seconds, minute, ten_minutes = rate.describe().split(" ")
    assert float(ten_seconds) == 5.0 and minute == "" and ten_minutes == ""


def test_stats_items_are_sampled_by_minute_hour_and_day() -> None:
    puts = StatsItemSet(TOPIC_PUT_NUMS)
    sampling = Sampling({}, [puts])
    start = 1_000_000_000
    puts.add("T", 0)
    sampling.tick(start)
    for second in range(1, 61):
        puts.add("T", 2)  # 2 messages a second
        sampling.tick(start + second * 1000)
    item = sampling.item(TOPIC_PUT_NUMS, "T")
    assert item is not None
    minute = item.figure(item.minute)  # the last 7 snapshots, 10 s apart: 60 s
    assert minute.sum == 120 and minute.tps == pytest.approx(2.0) and minute.avgpt == pytest.approx(2.0)
    assert sampling.item(TOPIC_PUT_NUMS, "other") is None


async def test_view_broker_stats_data_knows_topics_stored_in(broker: ServerProcess, client: RemotingClient) -> None:
    with pytest.raises(ServerSystemError, match="The stats <TOPIC_PUT_NUMS> <NothingStoredHere> not exist"):
        await admin.view_broker_stats(client, broker.address, TOPIC_PUT_NUMS, "NothingStoredHere")
    await send(client, broker.address, "StatsTopic", b"x")
    data = await admin.view_broker_stats(client, broker.address, TOPIC_PUT_NUMS, "StatsTopic")
    assert data.stats_minute.sum >= 0 and data.stats_hour.tps >= 0.0 and data.stats_day.avgpt >= 0.0


def heartbeat(client_id: str, group: str, topic: str) -> HeartbeatData:
    return HeartbeatData(
        client_id, consumer_data_set=[ConsumerData(group, subscription_data_set=[SubscriptionData(topic)])]
    )


async def test_consumer_connections_list_the_members_online(broker: ServerProcess, client: RemotingClient) -> None:
    assert await admin.get_consumer_connections(client, broker.address, "NobodyHome") is None
    await send_heartbeat(client, broker.address, heartbeat("10.0.0.1@member", "ConnGroup", "ConnTopic"))
    connections = await admin.get_consumer_connections(client, broker.address, "ConnGroup")
    assert connections is not None
    [member] = connections.connection_set
    assert member.client_id == "10.0.0.1@member" and member.client_addr.startswith("127.0.0.1:")
    assert member.language == "PYTHON" and member.version > 0
    assert list(connections.subscription_table) == ["ConnTopic"]
    assert connections.message_model is not None and connections.message_model.name == "CLUSTERING"


async def test_reset_offset_goes_to_the_members(broker: ServerProcess, client: RemotingClient) -> None:
    topic, group = "ResetTopic", "ResetGroup"
    await admin.create_topic(client, broker.address, TopicConfig(topic, 1, 1))
    for i in range(4):
        await send(client, broker.address, topic, f"m{i}".encode())
    await asyncio.sleep(0.003)
    middle = int(time.time() * 1000)
    await asyncio.sleep(0.05)
    for i in range(4):
        await send(client, broker.address, topic, f"n{i}".encode())
    await update_consumer_offset(client, broker.address, group, topic, 0, 8, oneway=False)
    assert await admin.invoke_reset_offset(client, broker.address, topic, group, middle) is None  # nobody online

    notices: list[RemotingCommand] = []
    processors = ProcessorTable()

    def reset(connection: Connection, request: RemotingCommand) -> None:
        notices.append(request)

    processors.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, reset)
    member = RemotingClient(processors, request_timeout_s=10)
    try:
        await send_heartbeat(member, broker.address, heartbeat("10.0.0.2@member", group, topic))
        answer = await admin.invoke_reset_offset(client, broker.address, topic, group, middle)
        assert answer is not None
        offsets = {queue.queue_id: offset for queue, offset in answer.offset_table.items()}
        # the first message stored at or after the time; Apache's: the nearest (the last one before it here)
        assert offsets[0] == (3 if broker.flavor == "apache" else 4)  # type: ignore[attr-defined]
        await eventually(lambda: notices, what="the member told to reset")
        notice = notices[0].decode_header(ResetOffsetRequestHeader)
        assert (notice.topic, notice.group, notice.timestamp) == (topic, group, middle)
        assert ResetOffsetBody.from_json(notices[0].body).offset_table == answer.offset_table
        # the broker commits nothing itself: the members do
        assert await query_consumer_offset(client, broker.address, group, topic, 0) == 8
    finally:
        await member.close()
