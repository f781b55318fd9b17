"""flavor=apache: the bundled broker answers as Apache RocketMQ 4.9 does (docs/operations.md), and the
client's offset of a time is exact on both flavors."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from broker.flavor import nearest_entry
from rocketspark import AsyncLitePullConsumer, AsyncProducer, ConsumeFromWhere
from rocketspark.client.api import admin, offset
from rocketspark.client.api.route import get_route
from rocketspark.client.consumer.time_offsets import offset_for_time
from rocketspark.processes import ServerProcess
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.remoting.client import RemotingClient
from tests.client.conftest import Cluster
from tests.client.test_push_consumer import FIRST, Recorder, create_topic, exactly, push_consumer, send_round_robin
from tests.harness import ServerFactory, dev_args
from tests.integration.broker_client import pull, pull_all, send, send_batch
from tests.waiting import eventually

FLAVORS = ("rocketspark", "apache")
GROUP = "flavor_reader"


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[ServerProcess, ServerProcess]]]:
    """Per flavor, a name server and a broker of that flavor (the window on: apache ignores it)."""
    factory = ServerFactory(tmp_path_factory.mktemp("flavors"))
    try:
        started = {}
        for flavor in FLAVORS:
            namesrv = factory.namesrv()
            extra = ("--set", f"flavor={flavor}", "--set", "duplicateWindowSeconds=600")
            started[flavor] = (namesrv, factory.broker(namesrv.address, *extra, broker_name=f"broker-{flavor}"))
        yield started
    finally:
        factory.stop_all()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    client = RemotingClient(request_timeout_s=10)
    yield client
    await client.close()


def broker_of(clusters: dict[str, tuple[ServerProcess, ServerProcess]], flavor: str) -> str:
    return clusters[flavor][1].address


async def test_codes_outside_apaches_table_are_not_supported(clusters, client: RemotingClient) -> None:
    """Every request code Apache's table lacks, ours (31001-31003) included, gets Apache's answer."""
    broker = broker_of(clusters, "apache")
    standard = {int(code) for code in RequestCode}
    others = [code for code in range(32768) if code not in standard]
    assert set(ExtensionCode) <= set(others)

    async def answer(code: int) -> tuple[int, str | None]:
        response = await client.invoke(broker, RemotingCommand.request(code))
        return response.code, response.remark

    for start in range(0, len(others), 1024):
        chunk = others[start : start + 1024]
        answers = await asyncio.gather(*(answer(code) for code in chunk))
        for code, got in zip(chunk, answers, strict=True):
            assert got == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {code} not supported")


async def test_clients_fall_back_to_standard_codes_once_per_broker(clusters, caplog: pytest.LogCaptureFixture) -> None:
    namesrv = clusters["apache"][0].address
    table = pa.table({"body": [f"m{i}".encode() for i in range(300)]})
    caplog.set_level(logging.INFO, logger="rocketspark.client")
    async with AsyncProducer("flavor_producer", namesrv_addr=namesrv) as producer:
        for start in range(0, 300, 100):
            await producer.send_arrow(table.slice(start, 100), "FallBack")
    first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    consumer = AsyncLitePullConsumer("flavor_fallback", namesrv_addr=namesrv, consume_from_where=first, arrow=True)
    rows = 0
    async with consumer:
        consumer.subscribe("FallBack")

        async def everything() -> bool:
            nonlocal rows
            rows += sum(batch.num_rows for batch in await consumer.poll(200))
            return rows >= 300

        await eventually(everything, timeout_s=20, interval_s=0, what="every row")
    assert rows == 300
    said = [record.getMessage() for record in caplog.records]
    assert sum("does not serve the Arrow send" in line for line in said) == 1
    assert sum("does not serve the Arrow pull" in line for line in said) == 1


async def test_every_send_is_stored_even_with_the_same_id(clusters, client: RemotingClient) -> None:
    counts = {}
    for flavor in FLAVORS:
        broker = broker_of(clusters, flavor)
        for _ in range(3):
            await send(client, broker, "SameId", b"again", UNIQ_KEY="ID-1")
        counts[flavor] = len(await pull_all(client, broker, "SameId", 0))
    assert counts == {"rocketspark": 1, "apache": 3}


async def test_standard_pulls_are_capped_as_apaches(clusters, client: RemotingClient) -> None:
    """At most 32 messages, and no more bytes than 256 KiB once the first message is in."""
    found = {}
    for flavor in FLAVORS:
        broker = broker_of(clusters, flavor)
        await send_batch(client, broker, "ManySmall", [b"s"] * 100)
        for _ in range(4):
            await send(client, broker, "FewLarge", b"L" * 100 * 1024)
        small = await pull(client, broker, "ManySmall", 0, 0, max_nums=1000)
        large = await pull(client, broker, "FewLarge", 0, 0, max_nums=1000)
        found[flavor] = (small.next_begin_offset, large.next_begin_offset)
    assert found == {"rocketspark": (100, 4), "apache": (32, 2)}


async def store_times(client: RemotingClient, broker: str, topic: str) -> list[int]:
    """Store times of a queue holding one message, a batch stored in one millisecond, and two more."""
    await send(client, broker, topic, b"first")
    await asyncio.sleep(0.03)
    await send_batch(client, broker, topic, [b"same millisecond"] * 40)
    for body in (b"third", b"last"):
        await asyncio.sleep(0.03)
        await send(client, broker, topic, body)
    times = [m.store_timestamp for m in await pull_all(client, broker, topic, 0)]
    assert len(times) == 43 and len(set(times[1:41])) == 1 and len(set(times)) == 4
    return times


def times_to_ask(times: list[int]) -> list[int]:
    """Before the oldest, at and around each store time, between them and past the newest."""
    asked = {times[0] - 10_000, times[-1] + 10_000}
    for stored in set(times):
        asked |= {stored - 1, stored, stored + 1}
    ordered = sorted(set(times))
    asked |= {(a + b) // 2 for a, b in itertools.pairwise(ordered)}
    return sorted(asked)


async def test_apache_answers_the_time_search_with_the_nearest_entry(clusters, client: RemotingClient) -> None:
    broker = broker_of(clusters, "apache")
    times = await store_times(client, broker, "NearestTimes")

    async def store_time_at(at: int) -> int:
        return times[at]

    for timestamp in times_to_ask(times):
        answer = await offset.search_offset(client, broker, "NearestTimes", 0, timestamp)
        assert answer == await nearest_entry(store_time_at, 0, len(times), timestamp), timestamp
    assert await offset.search_offset(client, broker, "NearestTimes", 0, times[-1] + 10_000) == len(times) - 1
    assert await offset.search_offset(client, broker, "NearestTimes", 0, times[0] - 10_000) == 0
    assert await offset.search_offset(client, broker, "NearestTimes", 0, times[1]) != 1  # lands inside the batch


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_the_offset_of_a_time_is_exact_on_both_flavors(clusters, client: RemotingClient, flavor: str) -> None:
    broker = broker_of(clusters, flavor)
    topic = f"ExactTimes-{flavor}"
    times = await store_times(client, broker, topic)
    for timestamp in times_to_ask(times):
        expected = next((i for i, stored in enumerate(times) if stored >= timestamp), len(times))
        assert await offset_for_time(client, broker, GROUP, topic, 0, timestamp) == expected, timestamp
    namesrv = clusters[flavor][0].address
    async with AsyncLitePullConsumer("flavor_seek", namesrv_addr=namesrv) as consumer:
        queue = next(q for q in await consumer.fetch_queues(topic) if q.queue_id == 0)
        assert await consumer.offset_for_timestamp(queue, times[1]) == 1
        assert await consumer.offset_for_timestamp(queue, times[-1] + 1) == len(times)


async def pulled(client: RemotingClient, broker: str) -> tuple[int, int]:
    """The broker's standard pull counters: (requests, messages)."""
    info = await admin.get_runtime_info(client, broker)
    return int(info["standardPullRequests"]), int(info["standardPullMessages"])


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_lite_pull_and_push_consumers_read_what_a_producer_sent(
    clusters, client: RemotingClient, flavor: str
) -> None:
    """100 messages in one queue, read by a lite-pull consumer and by a push consumer that ask for 100
    a pull: the same messages on both flavors; on apache each pull brings at most 32, so at least 4."""
    namesrv, broker = clusters[flavor]
    cluster = Cluster(namesrv, broker)
    topic = f"ClientsRead-{flavor}"
    await create_topic(cluster, topic, 1)
    bodies = [f"{flavor} {i}".encode() for i in range(100)]
    await send_round_robin(cluster, topic, bodies)

    before = await pulled(client, broker.address)
    consumer = AsyncLitePullConsumer(
        f"{topic}-lite", namesrv_addr=namesrv.address, consume_from_where=FIRST, pull_batch_size=100
    )
    read: list[bytes] = []
    async with consumer:
        consumer.subscribe(topic)

        async def everything() -> bool:
            read.extend(m.body for m in await consumer.poll(200))
            return len(read) >= 100

        await eventually(everything, timeout_s=20, interval_s=0, what="every message, pulled")
    lite = await pulled(client, broker.address)
    assert Counter(read) == Counter(bodies)

    pushed = Recorder()
    push = push_consumer(cluster, f"{topic}-push", pushed, topic, pull_batch_size=100)
    await push.start()
    try:
        await eventually(exactly([pushed], bodies), timeout_s=20, what="every message, pushed")
    finally:
        await push.shutdown()
    after = await pulled(client, broker.address)
    assert lite[1] - before[1] == after[1] - lite[1] == 100  # each read every message once, by standard pulls
    if flavor == "apache":
        assert lite[0] - before[0] >= 4 and after[0] - lite[0] >= 4


async def test_dev_runs_an_apache_broker(tmp_path: Path, client: RemotingClient) -> None:
    process = ServerProcess(
        "rocketspark.dev",
        dev_args(tmp_path, "--flavor", "apache"),
        tmp_path / "dev.log",
    )
    namesrv = process.start()  # the first boot line is the name server's
    try:
        route = await eventually(lambda: get_route(client, namesrv, "TBW102"), what="the broker's registration")
        broker = route.broker_datas[0].master_address
        assert broker is not None
        response = await client.invoke(broker, RemotingCommand.request(ExtensionCode.ARROW_PULL_MESSAGE))
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    finally:
        assert process.stop() == 0
