"""The server's own accept path on asyncio's loop, in this process: every accepted socket (plain or TLS)
has TCP_NODELAY; with TLS disabled and frames allowed past 0x16 << 24 bytes, a connection opening with
0x16 is the plain frame it is; every address the host resolves to is bound, on one port; and a client
trusts any certificate for "any" as for "insecure"; TlsHandshakeError is exported."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from rocketspark.client.api.route import get_cluster_info
from rocketspark.errors import TlsHandshakeError
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.client import RemotingClient
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.server import RemotingServer
from rocketspark.remoting.tls import PERMISSIVE_MAX_FRAME_LENGTH, ServerTls, TlsTrust, client_context, server_tls
from tests.tls.certs import Certificates
from tests.waiting import eventually


def cluster_info_table() -> ProcessorTable:
    processors = ProcessorTable()
    processors.register(RequestCode.GET_BROKER_CLUSTER_INFO, lambda _, request: request.response(body=b"{}"))
    return processors


@pytest.fixture
async def permissive(certs: Certificates) -> AsyncIterator[RemotingServer]:
    server = RemotingServer(cluster_info_table(), tls=server_tls("permissive", certs.cert, certs.key))
    await server.start()
    yield server
    await server.stop()


def nodelay(connection: Connection) -> int:
    sock = connection._transport.get_extra_info("socket")
    return int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


async def test_accepted_sockets_send_without_delay(permissive: RemotingServer, certs: Certificates) -> None:
    plain, tls = RemotingClient(), RemotingClient(use_tls=True, tls_trust=certs.ca)
    try:
        for client in (plain, tls):
            await client.invoke(permissive.address, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        assert len(permissive.connections) == 2
        assert [nodelay(connection) for connection in permissive.connections] == [1, 1]
    finally:
        await plain.close()
        await tls.close()


async def test_disabled_tls_with_long_frames_serves_a_frame_opening_with_0x16() -> None:
    long_frames = PERMISSIVE_MAX_FRAME_LENGTH + 1024
    assert not ServerTls().handshake_byte_is_tls(long_frames)
    assert ServerTls().handshake_byte_is_tls(PERMISSIVE_MAX_FRAME_LENGTH - 1)
    server = RemotingServer(cluster_info_table(), max_frame_length=long_frames)
    await server.start()
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            # the length of a frame of 0x16 << 24 bytes: a plain frame this server allows, not a handshake
            writer.write(PERMISSIVE_MAX_FRAME_LENGTH.to_bytes(4, "big") + b"\x00" * 16)
            await writer.drain()
            await eventually(lambda: len(server.connections) == 1, what="the connection served as plain")
        finally:
            writer.close()
    finally:
        await server.stop()


async def test_every_resolved_address_is_bound_on_one_port() -> None:
    resolved = {info[4][0] for info in socket.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM)}
    server = RemotingServer(cluster_info_table(), host="localhost")
    await server.start()
    client = RemotingClient()
    try:
        for host in resolved:  # 127.0.0.1, and ::1 where localhost names it too
            address = f"[{host}]:{server.port}" if ":" in host else f"{host}:{server.port}"
            await get_cluster_info(client, address)
    finally:
        await client.close()
        await server.stop()


async def test_any_is_insecure_trust(permissive: RemotingServer) -> None:
    for word in ("any", "ANY", "insecure"):
        assert not client_context(word).check_hostname
        client = RemotingClient(use_tls=True, tls_trust=word)
        try:
            await get_cluster_info(client, permissive.address)
        finally:
            await client.close()
    assert client_context(TlsTrust.ANY).verify_mode == client_context("any").verify_mode


def test_tls_handshake_error_is_exported() -> None:
    """docs/client.md lists it among the errors one catches: `from rocketspark import TlsHandshakeError`."""
    import rocketspark

    assert rocketspark.TlsHandshakeError is TlsHandshakeError
    assert "TlsHandshakeError" in rocketspark.__all__
