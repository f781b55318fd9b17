"""The gRPC endpoint's listener in permissive mode (broker/grpc/tls.py), in process: one port takes plain
and TLS gRPC connections, hands each to the right listener of the gRPC server, and tells the RPCs the
client's own address; a connection that says nothing is closed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from broker.grpc import tls as grpc_tls
from broker.grpc.call import peer_address
from broker.grpc.tls import GrpcListener, GrpcTls
from rocketspark.remoting.tls import TlsMode
from tests.tls.certs import Certificates

METHOD = "/test.Who/Ask"


@pytest.fixture
async def permissive(certs: Certificates) -> AsyncIterator[int]:
    """A gRPC server whose one method answers "<peer gRPC saw> <peer the listener gives>"; its port."""
    tls = GrpcTls(TlsMode.PERMISSIVE, certs.cert.read_bytes(), certs.key.read_bytes())
    listener = GrpcListener(tls)

    async def who(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return f"{peer_address(context.peer())} {listener.peer(context.peer())}".encode()

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("test.Who", {"Ask": grpc.unary_unary_rpc_method_handler(who)}),)
    )
    port = listener.add_port(server, "127.0.0.1:0")
    await server.start()
    await listener.start()
    try:
        yield port
    finally:
        await listener.stop_accepting()
        await server.stop(0)
        listener.close()


async def ask(channel: grpc.aio.Channel) -> tuple[str, str]:
    async with channel:
        seen, given = (await channel.unary_unary(METHOD)(b"", timeout=10)).decode().split(" ")
    return seen, given


async def test_plain_and_tls_on_one_port_with_the_clients_address(permissive: int, certs: Certificates) -> None:
    address = f"127.0.0.1:{permissive}"
    trust = grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
    for channel in (grpc.aio.insecure_channel(address), grpc.aio.secure_channel(address, trust)):
        seen, given = await ask(channel)
        assert seen.startswith("127.0.0.1:") and given.startswith("127.0.0.1:")
        assert given != seen  # gRPC saw the hand-over's connection; the RPC is given the client's


async def test_a_silent_connection_is_closed(permissive: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grpc_tls, "FIRST_BYTE_TIMEOUT_S", 0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", permissive)
    try:
        assert await asyncio.wait_for(reader.read(1), timeout=5) == b""  # closed by the listener
    finally:
        writer.close()
