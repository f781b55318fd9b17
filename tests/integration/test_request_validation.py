"""Malformed input over real sockets: undecodable frames, bad header fields, bad names, frame caps.

Every bad request gets a specific response code and a remark naming what is wrong; a frame that
cannot be decoded closes its connection (and only it) with a logged protocol error.
"""

from __future__ import annotations

import asyncio
import shutil
import struct
from pathlib import Path

import pytest

from broker.startup import parse_args
from rocketspark.client.api import admin
from rocketspark.client.api.client_manage import send_heartbeat
from rocketspark.processes import ServerProcess
from rocketspark.protocol.body.heartbeat import ConsumerData, HeartbeatData, ProducerData
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.protocol.codec import FrameDecoder, encode
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.namesrv import GetRouteInfoRequestHeader
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull, pull_all, send
from tests.waiting import eventually

MIB = 1024 * 1024


async def exchange(address: str, data: bytes, timeout_s: float = 5.0) -> tuple[list[RemotingCommand], bool]:
    """Write raw bytes; the commands answered until the server closed the connection (or the
    deadline passed), and whether it closed it."""
    host, port = address.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    decoder = FrameDecoder()
    answers: list[RemotingCommand] = []
    closed = False
    try:
        writer.write(data)
        async with asyncio.timeout(timeout_s):
            while chunk := await reader.read(65536):
                answers.extend(decoder.feed(chunk))
            closed = True
    except ConnectionResetError:  # closed with our request unread
        closed = True
    except TimeoutError:
        pass
    finally:
        writer.close()
    return answers, closed


def route_request(body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader("Nowhere"), body=body)


async def test_valid_frame_then_malformed_frame(namesrv: ServerProcess) -> None:
    """The valid request is answered, then the connection is closed with a logged ProtocolError."""
    malformed = struct.pack(">ii", 12, 8) + b"not json"
    answers, closed = await exchange(namesrv.address, encode(route_request()) + malformed)
    assert [a.code for a in answers] == [ResponseCode.TOPIC_NOT_EXIST]
    assert closed
    logged = "WARNING rocketspark.remoting.connection: closing connection 127.0.0.1:"
    await eventually(
        lambda: logged in namesrv.log_path.read_text() and "undecodable JSON header" in namesrv.log_path.read_text(),
        what="logged protocol error",
    )
    assert "BufferError" not in namesrv.log_path.read_text()
    answers, _ = await exchange(namesrv.address, encode(route_request()), timeout_s=1)
    assert [a.code for a in answers] == [ResponseCode.TOPIC_NOT_EXIST]


def request(code: int, **fields: str) -> RemotingCommand:
    command = RemotingCommand.request(code)
    command.ext_fields.update(fields)
    return command


def pull_fields(**changes: str) -> dict[str, str]:
    fields = {
        "consumerGroup": "g1",
        "topic": "Valid",
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": "0",
        "subscription": "*",
        "expressionType": "TAG",
    }
    fields.update(changes)
    return {k: v for k, v in fields.items() if v != "<missing>"}


BAD_REQUESTS = [
    (request(RequestCode.PULL_MESSAGE, **pull_fields(maxMsgNums="0")), "maxMsgNums"),
    (request(RequestCode.PULL_MESSAGE, **pull_fields(maxMsgNums="-3")), "maxMsgNums"),
    (request(RequestCode.PULL_MESSAGE, **pull_fields(queueId="abc")), "queueId"),
    (request(RequestCode.PULL_MESSAGE, **pull_fields(queueId="-1")), "queueId"),
    (request(RequestCode.PULL_MESSAGE, **pull_fields(topic="<missing>")), "topic"),
    (request(RequestCode.PULL_MESSAGE, **pull_fields(consumerGroup="g1\n")), "consumerGroup"),
    (request(RequestCode.GET_MAX_OFFSET, topic="Valid", queueId="x"), "queueId"),
    (request(RequestCode.QUERY_CONSUMER_OFFSET, topic="Valid", queueId="0"), "consumerGroup"),
    (request(RequestCode.SEND_MESSAGE_V2, a="p", b="Valid", c="TBW102", d="4", e="one"), "e"),
]


async def test_malformed_header_fields_are_invalid_parameter(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address)
    client = RemotingClient(request_timeout_s=5)
    try:
        await admin.create_topic(client, broker.address, TopicConfig("Valid", 1, 1))
        await send(client, broker.address, "Valid", b"m")
        for bad, field in BAD_REQUESTS:
            response = await client.invoke(broker.address, bad)
            assert response.code == ResponseCode.INVALID_PARAMETER, (bad.ext_fields, response.remark)
            assert f"{field}" in (response.remark or ""), response.remark
            assert "Error:" not in (response.remark or "")  # no internal exception text
        good = await pull(client, broker.address, "Valid", 0, 0, max_nums=1)
        assert good.next_begin_offset == 1
    finally:
        await client.close()


async def test_names_with_a_trailing_newline_are_refused(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address)
    client = RemotingClient(request_timeout_s=5)
    try:
        with pytest.raises(Exception, match="INVALID_PARAMETER") as refused:
            await admin.create_topic(client, broker.address, TopicConfig("Orders\n", 1, 1))
        assert "'Orders\\n'" in str(refused.value)
        for heartbeat in (
            HeartbeatData("c1", consumer_data_set=[ConsumerData("readers\n")]),
            HeartbeatData("c1", producer_data_set=[ProducerData("writers|x y")]),
        ):
            response = await client.invoke(
                broker.address, RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat.to_json())
            )
            assert response.code == ResponseCode.INVALID_PARAMETER
            assert "group name" in (response.remark or "")
        await send_heartbeat(client, broker.address, HeartbeatData("c1", consumer_data_set=[ConsumerData("readers")]))
        topics = (await admin.get_all_topic_config(client, broker.address)).topic_config_table
        assert "%RETRY%readers" in topics
        assert not [t for t in topics if "\n" in t or " " in t]
    finally:
        await client.close()


async def test_recreated_topic_does_not_bring_back_old_messages(servers: ServerFactory, tmp_path: Path) -> None:
    """Delete a topic, create it again, and lose the consume queue files: recovery rebuilds the
    queues from the commit log, which still holds the first life's messages."""
    namesrv = servers.namesrv()
    data_dir = tmp_path / "broker-data"
    broker = servers.broker(namesrv.address, data_dir=data_dir)
    client = RemotingClient(request_timeout_s=5)
    try:
        await admin.create_topic(client, broker.address, TopicConfig("Reborn", 1, 1))
        for i in range(3):
            await send(client, broker.address, "Reborn", f"old-{i}".encode())
        await admin.delete_topic_in_broker(client, broker.address, "Reborn")
        await admin.create_topic(client, broker.address, TopicConfig("Reborn", 1, 1))
        for i in range(2):
            await send(client, broker.address, "Reborn", f"new-{i}".encode())
        assert [m.body for m in await pull_all(client, broker.address, "Reborn", 0)] == [b"new-0", b"new-1"]
    finally:
        await client.close()
    assert broker.stop() == 0
    shutil.rmtree(data_dir / "consumequeue")
    restarted = servers.broker(namesrv.address, data_dir=data_dir)
    reader = RemotingClient(request_timeout_s=5)
    try:
        stored = await pull_all(reader, restarted.address, "Reborn", 0)
        assert [(m.queue_offset, m.body) for m in stored] == [(0, b"new-0"), (1, b"new-1")]
    finally:
        await reader.close()


async def test_namesrv_frame_cap_is_a_setting(servers: ServerFactory) -> None:
    namesrv = servers.namesrv("--frame-max-length", str(MIB))
    answers, closed = await exchange(namesrv.address, encode(route_request(b"x" * (MIB + 1))))
    assert closed and not answers
    answers, _ = await exchange(namesrv.address, encode(route_request(b"x" * (MIB // 2))), timeout_s=1)
    assert [a.code for a in answers] == [ResponseCode.TOPIC_NOT_EXIST]


async def test_broker_frame_cap_is_a_setting(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address, "--set", f"frameMaxLength={MIB}")
    answers, closed = await exchange(broker.address, encode(route_request(b"x" * (MIB + 1))))
    assert closed and not answers
    client = RemotingClient(request_timeout_s=10, max_frame_length=MIB)
    try:
        await admin.create_topic(client, broker.address, TopicConfig("Big", 1, 1))
        bodies = [bytes([i]) * (400 * 1024) for i in range(3)]
        for body in bodies:
            await send(client, broker.address, "Big", body)
        # together 1.2 MiB: the broker answers within its cap, which the client shares
        assert [m.body for m in await pull_all(client, broker.address, "Big", 0)] == bodies
    finally:
        await client.close()


def test_frame_cap_setting_is_checked() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--set", "frameMaxLength=100"])
