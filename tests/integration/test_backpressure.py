"""Back-pressure: a broker whose store cannot keep up answers SYSTEM_BUSY instead of queueing without
bound, stores exactly what it acknowledged, and bounds per-connection work and held pulls.

The store is slowed for real: SYNC_FLUSH, a send queue of a few MiB and many concurrent 1 MiB sends
arriving faster than they can be written and fsynced.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from rocketspark.processes import ServerProcess
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.pull import FLAG_SUBSCRIPTION, FLAG_SUSPEND, PullMessageRequestHeader
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import properties, pull_all, send_header
from tests.integration.raw_frames import RawConnection
from tests.waiting import eventually

MIB = 1024 * 1024


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[ServerFactory]:
    servers = ServerFactory(tmp_path)
    try:
        yield servers
    finally:
        servers.stop_all()


def broker_with(factory: ServerFactory, *settings: str) -> ServerProcess:
    namesrv = factory.namesrv()
    extra: list[str] = []
    for setting in settings:
        extra += ["--set", setting]
    return factory.broker(namesrv.address, *extra)


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set size so far (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


def send_request(topic: str, key: str, body: bytes) -> RemotingCommand:
    header = send_header(topic, props=properties(keys=key))
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body)


async def runtime_info(connection: RawConnection) -> dict[str, str]:
    answer = await connection.invoke(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    table: dict[str, str] = orjson.loads(answer.body)["table"]
    return table


def held_pull(topic: str, offset: int, suspend_ms: int) -> RemotingCommand:
    header = PullMessageRequestHeader(
        consumer_group="backpressure_consumer",
        topic=topic,
        queue_id=0,
        queue_offset=offset,
        max_msg_nums=32,
        sys_flag=FLAG_SUBSCRIPTION | FLAG_SUSPEND,
        commit_offset=0,
        suspend_timeout_millis=suspend_ms,
        sub_version=0,
        subscription="*",
        expression_type="TAG",
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header)


@pytest.mark.slow
async def test_a_flood_of_large_sends_gets_system_busy_and_every_acknowledged_message_is_stored(
    factory: ServerFactory,
) -> None:
    broker = broker_with(
        factory,
        "flushDiskType=SYNC_FLUSH",
        "sendQueueMaxBytes=4194304",
        "maxGroupCommitBytes=4194304",
        "batchCacheBytes=8388608",
    )
    topic = "Flood"
    connections, per_connection = 8, 32
    async with RawConnection(broker.address) as probe:
        assert (await probe.invoke(send_request(topic, "warm-up", b"w"))).code == ResponseCode.SUCCESS
    rss_before = peak_rss_mib(broker.pid)
    opened = [RawConnection(broker.address) for _ in range(connections)]
    for connection in opened:
        await connection.__aenter__()
    try:
        requests = [
            [send_request(topic, f"k-{c}-{i}", bytes([i]) * MIB) for i in range(per_connection)]
            for c in range(connections)
        ]
        for connection, batch in zip(opened, requests, strict=True):
            for request in batch:
                connection.write(request)
        answers = await asyncio.gather(
            *(c.responses([r.opaque for r in batch], timeout_s=60) for c, batch in zip(opened, requests, strict=True))
        )
    finally:
        for connection in opened:
            await connection.__aexit__(None, None, None)
    rss_growth = peak_rss_mib(broker.pid) - rss_before
    codes = [a.code for batch in answers for a in batch]
    busy = codes.count(ResponseCode.SYSTEM_BUSY)
    acknowledged = {
        f"k-{c}-{i}" for c, batch in enumerate(answers) for i, a in enumerate(batch) if a.code == ResponseCode.SUCCESS
    }
    print(
        f"{len(codes)} sends of 1 MiB: {len(acknowledged)} stored, {busy} SYSTEM_BUSY; peak RSS +{rss_growth:.0f} MiB"
    )
    assert set(codes) <= {ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY}
    assert busy > 0 and acknowledged
    busy_remarks = [a.remark or "" for batch in answers for a in batch if a.code == ResponseCode.SYSTEM_BUSY]
    assert all("busy" in remark for remark in busy_remarks)
    # 256 MiB were offered at once: without the bounds the broker queued all of it (peak RSS +243 MiB
    # measured). With them it holds a few MiB of sends, rounds and cached batches: +56..64 MiB measured.
    # (It was +144 alone and +208..228 under a busy CI run while the records of stored sends waited in
    # memory for the next index build, and while refusals waited for a task's first step.)
    assert rss_growth < 160, f"the broker's peak RSS grew {rss_growth:.0f} MiB"
    client = RemotingClient(request_timeout_s=30)
    try:
        stored = await pull_all(client, broker.address, topic, 0)
    finally:
        await client.close()
    assert {m.keys for m in stored} == acknowledged | {"warm-up"}


async def test_sends_that_wait_too_long_in_the_send_queue_get_system_busy(factory: ServerFactory) -> None:
    broker = broker_with(factory, "flushDiskType=SYNC_FLUSH", "waitTimeMillsInSendQueue=1")
    topic = "Waiting"
    async with RawConnection(broker.address) as connection:
        requests = [send_request(topic, f"w-{i}", bytes([i]) * 256 * 1024) for i in range(64)]
        for request in requests:
            connection.write(request)
        answers = await connection.responses([r.opaque for r in requests], timeout_s=60)
    timed_out = [a.remark or "" for a in answers if a.code == ResponseCode.SYSTEM_BUSY]
    assert timed_out and all("TIMEOUT_CLEAN_QUEUE" in r and "period in queue" in r for r in timed_out)
    assert {a.code for a in answers} <= {ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY}
    client = RemotingClient(request_timeout_s=30)
    try:
        stored = await pull_all(client, broker.address, topic, 0)
    finally:
        await client.close()
    assert len(stored) == sum(a.code == ResponseCode.SUCCESS for a in answers)


async def test_pulls_beyond_max_held_pull_requests_get_system_busy(factory: ServerFactory) -> None:
    broker = broker_with(factory, "maxHeldPullRequests=5")
    topic = "Held"
    async with RawConnection(broker.address) as connection:
        assert (await connection.invoke(send_request(topic, "first", b"m"))).code == ResponseCode.SUCCESS
        pulls = [held_pull(topic, 1, 30_000) for _ in range(8)]
        for pull in pulls:
            connection.write(pull)
        busy = await connection.responses([p.opaque for p in pulls[5:]], timeout_s=5)
        assert [a.code for a in busy] == [ResponseCode.SYSTEM_BUSY] * 3
        assert "maxHeldPullRequests" in (busy[0].remark or "")
        assert (await runtime_info(connection))["heldPullRequests"] == "5"
        assert (await connection.invoke(send_request(topic, "wakes them", b"m"))).code == ResponseCode.SUCCESS
        woken = await connection.responses([p.opaque for p in pulls[:5]], timeout_s=5)
        assert [a.code for a in woken] == [ResponseCode.SUCCESS] * 5


@pytest.mark.slow
async def test_a_connection_with_max_in_flight_requests_is_not_read_until_one_ends(factory: ServerFactory) -> None:
    broker = broker_with(factory, "maxInFlightRequestsPerConnection=4")
    topic = "InFlight"
    suspend_ms = 1500
    async with RawConnection(broker.address) as flooder, RawConnection(broker.address) as observer:
        assert (await observer.invoke(send_request(topic, "first", b"m"))).code == ResponseCode.SUCCESS
        pulls = [held_pull(topic, 1, suspend_ms) for _ in range(10)]
        started = time.monotonic()
        for pull in pulls:
            flooder.write(pull)

        async def four_held() -> bool:
            return (await runtime_info(observer))["heldPullRequests"] == "4"

        await eventually(four_held, timeout_s=5, what="4 held pulls (the in-flight bound of the connection)")
        samples = [int((await runtime_info(observer))["heldPullRequests"]) for _ in range(20)]
        assert max(samples) <= 4, samples
        answers = await flooder.responses([p.opaque for p in pulls], timeout_s=30)
        elapsed = time.monotonic() - started
    assert {a.code for a in answers} == {ResponseCode.PULL_NOT_FOUND}
    # three waves of at most 4 held pulls, each held for the whole suspend time
    assert elapsed >= 3 * suspend_ms / 1000 * 0.9, f"10 pulls took {elapsed:.2f} s"
