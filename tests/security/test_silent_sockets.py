"""Sockets that send nothing (issue 41, item 7): the server's first-byte peek gives up after a few
seconds, and past a bound of sockets not yet served a new one is closed at once."""

from __future__ import annotations

import asyncio
import socket

from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.client import RemotingClient
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.server import PEEK_TIMEOUT_S, RemotingServer


def table() -> ProcessorTable:
    processors = ProcessorTable()
    processors.register(RequestCode.GET_BROKER_CLUSTER_INFO, lambda _, request: request.response(body=b"{}"))
    return processors


async def closed_by_server(sock: socket.socket, within_s: float) -> bool:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(within_s):
            return await loop.sock_recv(sock, 1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def test_silent_sockets_are_capped_and_time_out() -> None:
    assert PEEK_TIMEOUT_S <= 10  # a few seconds, not the 120 s idle timeout
    server = RemotingServer(table(), peek_timeout_s=1.0, max_admitting=4)
    await server.start()
    silent = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]
    client = RemotingClient()
    try:
        for sock in silent:
            sock.setblocking(False)
        await asyncio.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", server.port))
        extra.setblocking(False)
        assert await closed_by_server(extra, 0.5)  # past the bound: closed at once
        extra.close()
        assert not await closed_by_server(silent[0], 0.3)  # the silent ones still wait
        assert all([await closed_by_server(sock, 2.0) for sock in silent])  # until the peek times out
        answer = await client.invoke(server.address, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        assert answer.body == b"{}"  # and then a client is served again
    finally:
        for sock in silent:
            sock.close()
        await client.close()
        await server.stop()
