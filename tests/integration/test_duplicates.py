"""Duplicate detection: a send whose UNIQ_KEY was stored within duplicateWindowSeconds is stored once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pyarrow as pa
import pytest

from rocketspark.client.api.send import send_arrow, send_message
from rocketspark.message.batches.producer import producer_batch
from rocketspark.message.records.batch_body import BatchColumns, encode_batch_body
from rocketspark.protocol.codes import RequestCode
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import BROKER_NAME, properties, pull_all, send, send_header

#: the window these tests run with (it is off by default)
WINDOW = ("--set", "duplicateWindowSeconds=600")


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    client = RemotingClient(request_timeout_s=10)
    yield client
    await client.close()


async def test_standard_send_twice_is_stored_once(servers: ServerFactory, client: RemotingClient) -> None:
    broker = servers.broker(servers.namesrv().address, *WINDOW)
    first = await send(client, broker.address, "Dup", b"one", UNIQ_KEY="K-1")
    again = await send(client, broker.address, "Dup", b"one", UNIQ_KEY="K-1")
    assert (again.queue_offset, again.offset_msg_id, again.message_queue) == (
        first.queue_offset,
        first.offset_msg_id,
        first.message_queue,
    )
    other = await send(client, broker.address, "Dup", b"two", UNIQ_KEY="K-2")
    assert other.queue_offset == first.queue_offset + 1
    # concurrent sends of one key (likely in one group commit round) store it once too
    results = await asyncio.gather(*(send(client, broker.address, "Dup", b"c", UNIQ_KEY="K-3") for _ in range(20)))
    assert len({r.queue_offset for r in results}) == 1
    stored = await pull_all(client, broker.address, "Dup", 0)
    assert [m.body for m in stored] == [b"one", b"two", b"c"]
    # the same key in another topic, and messages without a key, are not duplicates
    await send(client, broker.address, "Dup2", b"one", UNIQ_KEY="K-1")
    assert len(await pull_all(client, broker.address, "Dup2", 0)) == 1


async def test_batch_with_a_repeated_key_stores_the_rest(servers: ServerFactory, client: RemotingClient) -> None:
    broker = servers.broker(servers.namesrv().address, *WINDOW)
    first = await send(client, broker.address, "DupBatch", b"a", UNIQ_KEY="B-1")
    entries = [(0, b"a", properties(UNIQ_KEY="B-1")), (0, b"b", properties(UNIQ_KEY="B-2"))]
    entries += [(0, b"c", properties(UNIQ_KEY="B-3")), (0, b"b", properties(UNIQ_KEY="B-2"))]
    header = send_header("DupBatch", batch=True)
    result = await send_message(
        client,
        broker.address,
        BROKER_NAME,
        header,
        encode_batch_body(BatchColumns.of(entries)),
        msg_id="",
        code=RequestCode.SEND_BATCH_MESSAGE,
        count=4,
    )
    ids = result.offset_msg_id.split(",")
    assert len(ids) == 4 and ids[0] == first.offset_msg_id and ids[1] == ids[3]
    assert result.queue_offset == 1  # the first row stored by this send
    stored = await pull_all(client, broker.address, "DupBatch", 0)
    assert [m.body for m in stored] == [b"a", b"b", b"c"]
    assert [m.offset_msg_id for m in stored] == [ids[0], ids[1], ids[2]]


async def test_arrow_send_repeated_is_stored_once(servers: ServerFactory, client: RemotingClient) -> None:
    broker = servers.broker(servers.namesrv().address, *WINDOW)
    n = 1000
    batch = producer_batch(
        pa.table({"body": [f"r{i}".encode() for i in range(n)], "uniq_key": [f"U{i:06d}" for i in range(n)]})
    )
    header = send_header("DupArrow")
    first = await send_arrow(client, broker.address, BROKER_NAME, header, batch, first_msg_id="")
    assert (first.queue_offset, first.count) == (0, n)
    again = await send_arrow(client, broker.address, BROKER_NAME, header, batch, first_msg_id="")
    assert again.count == 0 and again.offset_msg_id == first.offset_msg_id and again.queue_offset == 0
    # a batch that overlaps (the same messages again, then new ones): only its new rows are stored
    again_rows = range(n - 5, n + 5)
    overlap = producer_batch(
        pa.table({"body": [f"r{i}".encode() for i in again_rows], "uniq_key": [f"U{i:06d}" for i in again_rows]})
    )
    third = await send_arrow(client, broker.address, BROKER_NAME, header, overlap, first_msg_id="")
    assert (third.queue_offset, third.count) == (n, 5)
    stored = await pull_all(client, broker.address, "DupArrow", 0)
    assert len(stored) == n + 5
    assert len({m.msg_id for m in stored}) == n + 5


@pytest.mark.slow
async def test_window_survives_kill_minus_nine(servers: ServerFactory, tmp_path: Path, client: RemotingClient) -> None:
    namesrv = servers.namesrv()
    data_dir = tmp_path / "broker-data"
    broker = servers.broker(namesrv.address, *WINDOW, data_dir=data_dir)
    first = await send(client, broker.address, "DupCrash", b"one", UNIQ_KEY="C-1")
    batch = producer_batch(pa.table({"body": [b"r"] * 100, "uniq_key": [f"CA{i}" for i in range(100)]}))
    await send_arrow(client, broker.address, BROKER_NAME, send_header("DupCrash"), batch, first_msg_id="")
    broker.kill()
    restarted = servers.broker(namesrv.address, *WINDOW, data_dir=data_dir)
    reader = RemotingClient(request_timeout_s=10)
    try:
        again = await send(reader, restarted.address, "DupCrash", b"one", UNIQ_KEY="C-1")
        # the restarted broker listens on another port: compare the commit log offset part of the msgId
        assert again.queue_offset == first.queue_offset and again.offset_msg_id[-16:] == first.offset_msg_id[-16:]
        repeat = await send_arrow(
            reader, restarted.address, BROKER_NAME, send_header("DupCrash"), batch, first_msg_id=""
        )
        assert repeat.count == 0
        assert len(await pull_all(reader, restarted.address, "DupCrash", 0)) == 101
    finally:
        await reader.close()


async def test_after_the_window_the_key_is_stored_again(servers: ServerFactory, client: RemotingClient) -> None:
    broker = servers.broker(servers.namesrv().address, "--set", "duplicateWindowSeconds=1")
    first = await send(client, broker.address, "DupWindow", b"one", UNIQ_KEY="W-1")
    assert (await send(client, broker.address, "DupWindow", b"one", UNIQ_KEY="W-1")).queue_offset == 0
    deadline = time.monotonic() + 10
    while True:
        await asyncio.sleep(0.3)
        result = await send(client, broker.address, "DupWindow", b"one", UNIQ_KEY="W-1")
        if result.queue_offset != first.queue_offset:
            break
        assert time.monotonic() < deadline, "the key was still a duplicate 10 s after a 1 s window"
    assert len(await pull_all(client, broker.address, "DupWindow", 0)) == 2


async def test_window_zero_stores_duplicates(servers: ServerFactory, client: RemotingClient) -> None:
    broker = servers.broker(servers.namesrv().address, "--set", "duplicateWindowSeconds=0")
    for _ in range(3):
        await send(client, broker.address, "DupOff", b"one", UNIQ_KEY="O-1")
    assert len(await pull_all(client, broker.address, "DupOff", 0)) == 3


async def test_retry_topics_are_not_deduplicated(servers: ServerFactory, client: RemotingClient) -> None:
    broker = servers.broker(servers.namesrv().address, *WINDOW)
    for _ in range(2):
        await send(client, broker.address, "%RETRY%group", b"one", UNIQ_KEY="R-1")
    assert len(await pull_all(client, broker.address, "%RETRY%group", 0)) == 2
