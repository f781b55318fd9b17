"""TLS on the 5.x endpoint, from the 4.x port's settings: `tls.server.mode`, `tls.server.certPath`,
`tls.server.keyPath` (the mode defaults as for the 4.x port: `enforcing` with a certificate and ACL on).

* `disabled`: plain HTTP/2 only; `enforcing`: TLS only, with the broker's certificate (gRPC's own TLS).
* `permissive`: plain and TLS on the one port, as Apache's proxy serves them. gRPC cannot take both on
  one port, so the broker listens on the port itself and hands each connection, by its first byte (a
  TLS record starts with 0x16, an HTTP/2 preface with `P`), to one of two listeners of the gRPC server
  on loopback ports, copying its bytes both ways (TLS is not undone: the handshake is the client's
  with the gRPC server). `peer` gives the RPCs the client's own address, so ACL white lists and logs
  see it. The copy costs time: one call after another took about 0.2-0.5 ms more than on a port of
  its own on this machine (docs/security.md); permissive is a mode for moving clients to TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from dataclasses import dataclass, field
from typing import cast

import grpc

from broker.config import BrokerConfig
from broker.grpc.call import peer_address
from rocketspark.remoting.tls import TlsMode

log = logging.getLogger(__name__)

#: how long a connection may stay silent before its first byte says plain or TLS
FIRST_BYTE_TIMEOUT_S = 10.0
_TLS_RECORD = 0x16
_FIX = "set grpcServerPort (rocketspark dev: --grpc-port) to a free port, or to 0 to turn the endpoint off"


@dataclass(frozen=True)
class GrpcTls:
    """The endpoint's TLS mode and, unless disabled, the broker's PEM certificate chain and key."""

    mode: TlsMode = TlsMode.DISABLED
    certificate_chain: bytes = field(default=b"", repr=False)
    private_key: bytes = field(default=b"", repr=False)

    @classmethod
    def of(cls, config: BrokerConfig) -> GrpcTls:
        """The 4.x port's mode and certificate (config.server_tls() checks them: ConfigError naming the key)."""
        mode = config.server_tls().mode
        if mode is TlsMode.DISABLED:
            return cls()
        assert config.tls_server_cert_path is not None and config.tls_server_key_path is not None
        return cls(mode, config.tls_server_cert_path.read_bytes(), config.tls_server_key_path.read_bytes())

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.private_key, self.certificate_chain)])


class GrpcListener:
    """Binds a gRPC server's listening port by the TLS mode; in permissive mode, also serves it."""

    def __init__(self, tls: GrpcTls) -> None:
        self.tls = tls
        self._socket: socket.socket | None = None
        self._targets: dict[bool, int] = {}  # TLS or not -> loopback port of the gRPC server
        self._server: asyncio.Server | None = None
        self._pipes: set[_Front] = set()
        self._peers: dict[int, str] = {}  # loopback port of a handed-over connection -> the client's address

    def add_port(self, server: grpc.aio.Server, address: str) -> int:
        """Listen on `address` ("host:port"), before the server starts; the port bound. OSError naming
        the fix when it cannot."""
        try:
            if self.tls.mode is TlsMode.DISABLED:
                return server.add_insecure_port(address)
            if self.tls.mode is TlsMode.ENFORCING:
                return server.add_secure_port(address, self.tls.credentials())
            self._targets = {
                False: server.add_insecure_port("127.0.0.1:0"),
                True: server.add_secure_port("127.0.0.1:0", self.tls.credentials()),
            }
            host, _, port = address.rpartition(":")
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self._socket = socket.create_server((host.strip("[]"), int(port)), family=family)
            return int(self._socket.getsockname()[1])
        except (RuntimeError, OSError) as exc:
            raise OSError(f"the gRPC (RocketMQ 5.x) endpoint cannot listen on {address} ({exc}): {_FIX}") from None

    async def start(self) -> None:
        """Start taking connections (permissive mode; after the gRPC server started)."""
        if self._socket is not None:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_server(lambda: _Front(self), sock=self._socket)

    async def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def close(self) -> None:
        """Close the connections still handed over (after the gRPC server stopped)."""
        for pipe in list(self._pipes):
            pipe.close()

    def peer(self, grpc_peer: str) -> str:
        """The client's "ip:port" for gRPC's peer string (`ipv4:127.0.0.1:5000`)."""
        address = peer_address(grpc_peer)
        if self._peers and address.startswith("127.0.0.1:"):
            return self._peers.get(int(address.rpartition(":")[2]), address)
        return address


class _Back(asyncio.Protocol):
    """The connection to the gRPC server's loopback listener, for one client connection."""

    def __init__(self, front: _Front) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are no asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        self.front.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.close()

    def pause_writing(self) -> None:
        self.front.pause_reading()

    def resume_writing(self) -> None:
        self.front.resume_reading()


class _Front(asyncio.Protocol):
    """A client's connection to the permissive port: its first byte picks the listener it goes to."""

    def __init__(self, listener: GrpcListener) -> None:
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        self.back: _Back | None = None
        self.pending = bytearray()  # received before the loopback connection is up
        self.loopback_port = 0
        self._timer: asyncio.TimerHandle | None = None
        self._connecting: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are no asyncio.Transport subclass
        self.listener._pipes.add(self)
        self._timer = asyncio.get_running_loop().call_later(FIRST_BYTE_TIMEOUT_S, self.close)

    def data_received(self, data: bytes) -> None:
        if self.back is not None and self.back.transport is not None:
            self.back.transport.write(data)
            return
        self.pending += data
        if self._connecting is None:
            assert self.transport is not None
            self.transport.pause_reading()
            tls = data[0] == _TLS_RECORD
            self._connecting = asyncio.get_running_loop().create_task(self._connect(self.listener._targets[tls]))

    async def _connect(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, back = await loop.create_connection(lambda: _Back(self), "127.0.0.1", port)
        except OSError as exc:
            log.warning("gRPC endpoint: handing a connection to its listener failed: %s", exc)
            self.close()
            return
        if self.transport is None or self.transport.is_closing():
            transport.close()
            return
        if self._timer is not None:
            self._timer.cancel()
        self.back = back
        self.loopback_port = int(transport.get_extra_info("sockname")[1])
        self.listener._peers[self.loopback_port] = _address(self.transport)
        transport.write(bytes(self.pending))
        self.pending.clear()
        self.transport.resume_reading()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        if self.back is not None and self.back.transport is not None:
            self.back.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.back is not None and self.back.transport is not None:
            self.back.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.listener._pipes.discard(self)
        self.listener._peers.pop(self.loopback_port, None)
        for transport in (self.transport, self.back.transport if self.back else None):
            if transport is not None:
                with contextlib.suppress(RuntimeError):
                    transport.close()


def _address(transport: asyncio.Transport) -> str:
    peer = transport.get_extra_info("peername")
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
