"""tls.server.mode on a real name server: which connections each mode serves on its one port."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import AsyncIterator

import pytest

from broker.config import BrokerConfig
from broker.store.config import StoreConfig
from namesrv.config import NamesrvConfig
from rocketspark.client.api.route import get_cluster_info
from rocketspark.errors import ConfigError, ConnectionClosedError, TlsHandshakeError
from rocketspark.processes import ServerProcess
from rocketspark.protocol.codec import FrameDecoder, encode
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.client import RemotingClient
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.server import RemotingServer
from rocketspark.remoting.tls import PERMISSIVE_MAX_FRAME_LENGTH, TlsTrust, server_tls
from rocketspark.settings import build
from tests.harness import ServerFactory
from tests.tls.certs import Certificates


def tls_namesrv(servers: ServerFactory, certs: Certificates, *mode: str) -> ServerProcess:
    """A name server with the test certificate, in `mode` (no mode given: the default with a certificate)."""
    flags = ("--tls.server.certPath", str(certs.cert), "--tls.server.keyPath", str(certs.key))
    return servers.namesrv(*flags, *(("--tls.server.mode", *mode) if mode else ()))


@pytest.fixture
async def plain_client() -> AsyncIterator[RemotingClient]:
    client = RemotingClient(request_timeout_s=5.0)
    yield client
    await client.close()


@pytest.fixture
async def tls_client(certs: Certificates) -> AsyncIterator[RemotingClient]:
    client = RemotingClient(request_timeout_s=5.0, use_tls=True, tls_trust=certs.ca)
    yield client
    await client.close()


def raw_tls_request(address: str, certs: Certificates) -> RemotingCommand:
    """GET_BROKER_CLUSTER_INFO over a TLS socket of the standard library (not our client): the
    server's bytes only decode once TLS is unwrapped."""
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(certs.ca))
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        tls.sendall(encode(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)))
        decoder = FrameDecoder()
        while True:
            data = tls.recv(65536)
            assert data, "the server closed the TLS connection without answering"
            frames = list(decoder.feed(data))
            if frames:
                return frames[0]


async def test_permissive_serves_tls_and_plain_on_one_port(
    servers: ServerFactory, certs: Certificates, plain_client: RemotingClient, tls_client: RemotingClient
) -> None:
    namesrv = tls_namesrv(servers, certs)  # a certificate and no mode: permissive
    assert (await get_cluster_info(plain_client, namesrv.address)).broker_addr_table == {}
    assert (await get_cluster_info(tls_client, namesrv.address)).broker_addr_table == {}
    response = await asyncio.to_thread(raw_tls_request, namesrv.address, certs)
    assert response.code == ResponseCode.SUCCESS


async def test_enforcing_refuses_plain(
    servers: ServerFactory, certs: Certificates, plain_client: RemotingClient, tls_client: RemotingClient
) -> None:
    namesrv = tls_namesrv(servers, certs, "enforcing")
    await get_cluster_info(tls_client, namesrv.address)
    with pytest.raises(ConnectionClosedError):
        await get_cluster_info(plain_client, namesrv.address)
    assert "refused a plain connection" in namesrv.log_tail()


async def test_disabled_refuses_a_handshake(
    servers: ServerFactory, certs: Certificates, plain_client: RemotingClient, tls_client: RemotingClient
) -> None:
    for namesrv in (servers.namesrv(), tls_namesrv(servers, certs, "disabled")):  # the default, then explicit
        with pytest.raises(TlsHandshakeError, match="does the server accept TLS"):
            await get_cluster_info(tls_client, namesrv.address)
        await get_cluster_info(plain_client, namesrv.address)
        assert "refused a TLS handshake" in namesrv.log_tail()


async def test_client_refuses_an_untrusted_certificate_unless_told(servers: ServerFactory, certs: Certificates) -> None:
    namesrv = tls_namesrv(servers, certs, "enforcing")
    for trust in (None, TlsTrust.SYSTEM, certs.other_ca):  # the system's CAs, or another CA, never signed it
        client = RemotingClient(use_tls=True, tls_trust=trust)
        try:
            with pytest.raises(TlsHandshakeError, match="certificate is not trusted"):
                await get_cluster_info(client, namesrv.address)
        finally:
            await client.close()
    for trust in (certs.ca, str(certs.ca), TlsTrust.ANY, "insecure"):
        client = RemotingClient(use_tls=True, tls_trust=trust)
        try:
            await get_cluster_info(client, namesrv.address)
        finally:
            await client.close()


async def test_the_address_dialled_must_be_in_the_certificate(servers: ServerFactory, certs: Certificates) -> None:
    """The certificate names 127.0.0.1 and localhost: dialling 127.0.0.2 fails the host name check,
    unless the client trusts any certificate."""
    namesrv = tls_namesrv(servers, certs, "enforcing", "--listen", "0.0.0.0")
    port = namesrv.address.rsplit(":", 1)[1]
    for address in (f"127.0.0.1:{port}", f"localhost:{port}"):
        client = RemotingClient(use_tls=True, tls_trust=certs.ca)
        try:
            await get_cluster_info(client, address)
        finally:
            await client.close()
    client = RemotingClient(use_tls=True, tls_trust=certs.ca)
    try:
        with pytest.raises(TlsHandshakeError, match=r"does not name 127\.0\.0\.2"):
            await get_cluster_info(client, f"127.0.0.2:{port}")
    finally:
        await client.close()
    client = RemotingClient(use_tls=True, tls_trust=TlsTrust.ANY)
    try:
        await get_cluster_info(client, f"127.0.0.2:{port}")
    finally:
        await client.close()


async def test_a_silent_peer_is_dropped_after_the_idle_timeout(servers: ServerFactory, certs: Certificates) -> None:
    """The server waits for a client's first byte to tell TLS from plain: at most the idle timeout."""
    namesrv = servers.namesrv(
        "--idle-timeout-s", "0.5", "--tls.server.certPath", str(certs.cert), "--tls.server.keyPath", str(certs.key)
    )
    host, port = namesrv.address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        assert await asyncio.wait_for(reader.read(1), 30) == b""  # closed by the server, not by the deadline
    finally:
        writer.close()
    assert "nothing received within" in namesrv.log_tail()


def test_settings_that_cannot_work_are_refused(certs: Certificates) -> None:
    with pytest.raises(ConfigError, match=r"needs tls.server.certPath and tls.server.keyPath"):
        NamesrvConfig(tls_server_mode="enforcing")
    with pytest.raises(ConfigError, match="must be one of disabled, permissive, enforcing"):
        NamesrvConfig(tls_server_mode="strict", tls_server_cert_path=certs.cert, tls_server_key_path=certs.key)
    with pytest.raises(ConfigError, match="frame max length below"):
        NamesrvConfig(
            tls_server_cert_path=certs.cert, tls_server_key_path=certs.key, frame_max_length=PERMISSIVE_MAX_FRAME_LENGTH
        )
    with pytest.raises(ConfigError, match="not a PEM certificate"):
        NamesrvConfig(tls_server_cert_path=certs.key, tls_server_key_path=certs.key)
    assert struct.pack(">i", PERMISSIVE_MAX_FRAME_LENGTH - 1)[0] < 0x16  # any shorter frame opens below 0x16
    with pytest.raises(ConfigError, match=r"invalid settings in broker.conf: tls.server.mode=enforcing needs"):
        build((BrokerConfig, StoreConfig), {"tls.server.mode": "enforcing"}, "broker.conf")


async def test_one_port_serves_tls_and_plain_on_the_asyncio_loop(certs: Certificates) -> None:
    """The servers run on uvloop (above); the same server on asyncio's own loop, in this process."""
    processors = ProcessorTable()
    processors.register(RequestCode.GET_BROKER_CLUSTER_INFO, lambda _, request: request.response(body=b"{}"))
    server = RemotingServer(processors, tls=server_tls("permissive", certs.cert, certs.key))
    await server.start()
    plain, tls = RemotingClient(), RemotingClient(use_tls=True, tls_trust=certs.ca)
    try:
        for client in (plain, tls):
            response = await client.invoke(server.address, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert response.body == b"{}"
        assert len(server.connections) == 2
    finally:
        await plain.close()
        await tls.close()
        await server.stop()
