"""Remoting server and client over real loopback sockets, in one process."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import AsyncIterator

import pytest

from rocketspark.errors import (
    ConnectionClosedError,
    RemotingConnectError,
    RemotingTimeoutError,
    TopicNotExistError,
)
from rocketspark.protocol.codec import FrameDecoder, encode
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.client import RemotingClient
from rocketspark.remoting.connection import LARGE_BODY_BYTES, Connection
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.server import RemotingServer
from rocketspark.remoting.sync import SyncRemotingClient
from tests.waiting import eventually

ECHO = 1000
SLOW = 1001
FAIL = 1002
REFUSE = 1003
NEVER = 1004
ONEWAY_SINK = 1005
ONEWAY_SLOW = 1006


class Recorder:
    def __init__(self) -> None:
        self.oneway: list[RemotingCommand] = []
        self.connections: list[Connection] = []
        self.never_answered: list[RemotingCommand] = []
        self.slow_oneway: list[RemotingCommand] = []


def build_processors(recorder: Recorder) -> ProcessorTable:
    table = ProcessorTable()

    def echo(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        recorder.connections.append(connection)
        return request.response(body=request.body, remark=request.ext_fields.get("tag"))

    async def slow(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(float(request.ext_fields["delay"]))
        return request.response(body=request.body)

    def fail(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        raise KeyError("boom")

    def refuse(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        raise TopicNotExistError("topic X does not exist", code=ResponseCode.TOPIC_NOT_EXIST)

    async def never(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        recorder.never_answered.append(request)
        await asyncio.sleep(3600)
        raise AssertionError

    def sink(connection: Connection, request: RemotingCommand) -> None:
        recorder.oneway.append(request)

    table.register(ECHO, echo)
    table.register(SLOW, slow)
    table.register(FAIL, fail)
    table.register(REFUSE, refuse)
    table.register(NEVER, never)

    async def slow_sink(connection: Connection, request: RemotingCommand) -> None:
        await asyncio.sleep(0.05)
        recorder.slow_oneway.append(request)

    table.register(ONEWAY_SINK, sink)
    table.register(ONEWAY_SLOW, slow_sink)
    return table


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def server(recorder: Recorder) -> AsyncIterator[RemotingServer]:
    server = RemotingServer(build_processors(recorder), idle_timeout_s=120)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_request_response(server: RemotingServer, remoting_client: RemotingClient) -> None:
    request = RemotingCommand.request(ECHO, body=b"ping")
    response = await remoting_client.invoke(server.address, request)
    assert response.code == ResponseCode.SUCCESS
    assert response.is_response
    assert response.opaque == request.opaque
    assert response.body == b"ping"


async def test_large_bodies_written_after_their_frame_head_arrive_whole(
    server: RemotingServer, remoting_client: RemotingClient
) -> None:
    """Bodies from LARGE_BODY_BYTES on are written apart from their frame's head, both ways."""
    body = bytes(range(256)) * (3 * LARGE_BODY_BYTES // 256 + 7)
    requests = [RemotingCommand.request(ECHO, body=body[: len(body) - n]) for n in range(3)]
    responses = await asyncio.gather(*(remoting_client.invoke(server.address, r) for r in requests))
    for request, response in zip(requests, responses, strict=True):
        assert response.opaque == request.opaque
        assert response.body == request.body


async def test_out_of_order_responses_matched_by_opaque(
    server: RemotingServer, remoting_client: RemotingClient
) -> None:
    delays = [0.3, 0.0, 0.2, 0.1]
    requests = [
        RemotingCommand(code=SLOW, opaque=i + 1, ext_fields={"delay": str(d)}, body=bytes([i]))
        for i, d in enumerate(delays)
    ]
    responses = await asyncio.gather(*(remoting_client.invoke(server.address, r) for r in requests))
    assert [r.body for r in responses] == [bytes([i]) for i in range(4)]
    assert len(server.connections) == 1  # one reused connection


async def test_unknown_code_is_not_supported(server: RemotingServer, remoting_client: RemotingClient) -> None:
    response = await remoting_client.invoke(server.address, RemotingCommand.request(4242))
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "4242" in (response.remark or "")


async def test_processor_exception_is_system_error_and_connection_stays(
    server: RemotingServer, remoting_client: RemotingClient
) -> None:
    response = await remoting_client.invoke(server.address, RemotingCommand.request(FAIL))
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "KeyError" in (response.remark or "") and "boom" in (response.remark or "")
    refused = await remoting_client.invoke(server.address, RemotingCommand.request(REFUSE))
    assert refused.code == ResponseCode.TOPIC_NOT_EXIST
    assert refused.remark == "topic X does not exist"
    again = await remoting_client.invoke(server.address, RemotingCommand.request(ECHO, body=b"still up"))
    assert again.body == b"still up"
    assert len(server.connections) == 1


async def test_oneway_gets_no_response(
    server: RemotingServer, remoting_client: RemotingClient, recorder: Recorder
) -> None:
    await remoting_client.invoke_oneway(server.address, RemotingCommand.request(ONEWAY_SINK, body=b"a"))
    # a oneway request to a code that answers must not produce a response frame either
    await remoting_client.invoke_oneway(server.address, RemotingCommand.request(ECHO, body=b"b"))
    response = await remoting_client.invoke(server.address, RemotingCommand.request(ECHO, body=b"c"))
    assert response.body == b"c"
    assert [c.body for c in recorder.oneway] == [b"a"]


async def test_oneway_produces_no_bytes_on_the_wire(server: RemotingServer) -> None:
    host, port = server.address.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    oneway = RemotingCommand.request(ECHO, body=b"x", oneway=True)
    probe = RemotingCommand.request(ECHO, body=b"y")
    writer.write(encode(oneway) + encode(probe))
    data = await asyncio.wait_for(reader.read(65536), 5)
    responses = list(FrameDecoder().feed(data))
    assert [r.opaque for r in responses] == [probe.opaque]
    writer.close()
    await writer.wait_closed()


async def test_oneway_requests_read_before_the_peer_closes_still_take_effect(
    server: RemotingServer, recorder: Recorder
) -> None:
    """A consumer's last offset update or a producer's END_TRANSACTION is oneway and sent just
    before the connection closes: its handler runs to the end, though no answer can be written."""
    host, port = server.address.split(":")
    _reader, writer = await asyncio.open_connection(host, int(port))
    requests = [RemotingCommand.request(ONEWAY_SLOW, body=f"{i}".encode(), oneway=True) for i in range(3)]
    writer.write(b"".join(encode(request) for request in requests))
    writer.close()
    await writer.wait_closed()
    await eventually(lambda: len(recorder.slow_oneway) == 3, timeout_s=5, what="every oneway request handled")
    assert [r.body for r in recorder.slow_oneway] == [b"0", b"1", b"2"]


async def test_timeout_is_typed_and_late_connection_survives(
    server: RemotingServer, remoting_client: RemotingClient
) -> None:
    with pytest.raises(RemotingTimeoutError, match="no response within"):
        await remoting_client.invoke(server.address, RemotingCommand.request(NEVER), timeout_s=0.2)
    response = await remoting_client.invoke(server.address, RemotingCommand.request(ECHO, body=b"ok"))
    assert response.body == b"ok"


async def test_pending_requests_fail_when_connection_closes(
    server: RemotingServer, remoting_client: RemotingClient, recorder: Recorder
) -> None:
    pending = [
        asyncio.ensure_future(remoting_client.invoke(server.address, RemotingCommand.request(NEVER), timeout_s=30))
        for _ in range(3)
    ]
    await eventually(lambda: len(recorder.never_answered) == 3, what="the requests at the server")
    for connection in list(server.connections):
        connection.close("test closes it")
    results = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 5)
    assert all(isinstance(r, ConnectionClosedError) for r in results), results
    # the client reconnects on the next request
    response = await remoting_client.invoke(server.address, RemotingCommand.request(ECHO, body=b"again"))
    assert response.body == b"again"


async def test_connect_error_is_clear_and_fast() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = RemotingClient(connect_timeout_s=1.0)
    try:
        with pytest.raises(RemotingConnectError, match=f"127.0.0.1:{port}"):
            await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO))
    finally:
        await client.close()


async def test_server_sends_requests_to_its_client(server: RemotingServer, recorder: Recorder) -> None:
    notified: list[RemotingCommand] = []
    client_processors = ProcessorTable()

    def on_notify(connection: Connection, request: RemotingCommand) -> RemotingCommand:
        notified.append(request)
        return request.response(body=b"client answer")

    client_processors.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    client = RemotingClient(client_processors)
    try:
        await client.invoke(server.address, RemotingCommand.request(ECHO))
        server_side = recorder.connections[-1]
        answer = await server_side.invoke(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED), 5)
        assert answer.body == b"client answer"
        server_side.invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED))
        await eventually(lambda: len(notified) == 2, what="the oneway request")
        assert notified[1].is_oneway
    finally:
        await client.close()


async def test_idle_connections_are_closed(recorder: Recorder) -> None:
    server = RemotingServer(build_processors(recorder), idle_timeout_s=0.3)
    await server.start()
    client = RemotingClient()
    try:
        await client.invoke(server.address, RemotingCommand.request(ECHO))
        connection = next(iter(server.connections))
        await asyncio.wait_for(connection.wait_closed(), 3)
        assert not server.connections
        response = await client.invoke(server.address, RemotingCommand.request(ECHO, body=b"back"))
        assert response.body == b"back"
    finally:
        await client.close()
        await server.stop()


async def test_malformed_frame_closes_only_that_connection(
    server: RemotingServer, remoting_client: RemotingClient
) -> None:
    await remoting_client.invoke(server.address, RemotingCommand.request(ECHO))
    host, port = server.address.split(":")
    for garbage in (struct.pack(">ii", 12, 8) + b"not json", struct.pack(">i", 0x7FFFFFF0) + b"xx"):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(garbage)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
        writer.close()
    response = await remoting_client.invoke(server.address, RemotingCommand.request(ECHO, body=b"fine"))
    assert response.body == b"fine"


async def test_sync_facade_from_many_threads(server: RemotingServer) -> None:
    address = server.address
    results: dict[int, bytes] = {}
    errors: list[BaseException] = []

    def work(client: SyncRemotingClient, i: int) -> None:
        try:
            request = RemotingCommand.request(SLOW, body=str(i).encode())
            request.ext_fields["delay"] = "0.01"
            results[i] = client.invoke(address, request, timeout_s=5).body
        except BaseException as exc:
            errors.append(exc)

    def run_all() -> None:
        with SyncRemotingClient() as client:
            threads = [threading.Thread(target=work, args=(client, i)) for i in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(10)

    await asyncio.to_thread(run_all)
    assert not errors
    assert results == {i: str(i).encode() for i in range(16)}
