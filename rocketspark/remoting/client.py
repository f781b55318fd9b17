"""asyncio remoting client: one reused connection per address, requests with deadlines, and the
RPC hook every outgoing request passes (request signing)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Protocol

from rocketspark.aio import wait_until
from rocketspark.errors import (
    ConnectionClosedError,
    RemotingConnectError,
    RemotingTimeoutError,
    TlsHandshakeError,
    TlsRequiredError,
)
from rocketspark.protocol.codec import DEFAULT_MAX_FRAME_LENGTH
from rocketspark.protocol.codes import code_name
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.connection import DEFAULT_IDLE_TIMEOUT_S, Connection
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.signing import AclClientRPCHook, SessionCredentials
from rocketspark.remoting.tls import TrustSetting, client_context, require_tls_for_trust

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 3.0
#: what to do when a plain connection is closed unanswered, in each client's words
TLS_REQUIRED_FIX = (
    "if it enforces TLS (tls.server.mode=enforcing), connect with TLS: use_tls=True in the client, "
    "--tls for the rocketspark command, useTLS=true in Spark, tls.enable=true for a broker"
)
#: OpenSSL's verify codes of a certificate that does not name the host dialled (host name, IP address)
_NAME_MISMATCH = (62, 64)


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host, int(port)


class RPCHook(Protocol):
    """What Apache RocketMQ calls an RPC hook: sees every request the client sends, last thing
    before it goes out (after every header field is set), and may add fields to it."""

    def before_request(self, address: str, request: RemotingCommand) -> None: ...


class RemotingClient:
    """Connections to name servers and brokers, created on first use and reused.

    A closed connection is dropped and the next request to that address reconnects.
    Requests the server sends to us (such as NOTIFY_CONSUMER_IDS_CHANGED) go to `processors`; our
    answers to them do not pass the hook. Every request this client sends, answered or oneway,
    passes `rpc_hook` on its way out; `credentials` is short for
    `rpc_hook=AclClientRPCHook(credentials)`: every request is signed (ACL 1.0).
    With `use_tls`, every connection is TLS, the server's certificate verified against `tls_trust`
    (:func:`rocketspark.remoting.tls.client_context`) and the host dialled.
    """

    def __init__(
        self,
        processors: ProcessorTable | None = None,
        *,
        connect_timeout_s: float = 3.0,
        request_timeout_s: float = DEFAULT_TIMEOUT_S,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        rpc_hook: RPCHook | None = None,
        credentials: SessionCredentials | None = None,
        use_tls: bool = False,
        tls_trust: TrustSetting = None,
    ) -> None:
        if rpc_hook is not None and credentials is not None:
            raise ValueError("give rpc_hook or credentials, not both")
        self.rpc_hook = AclClientRPCHook(credentials) if credentials is not None else rpc_hook
        self.processors = processors if processors is not None else ProcessorTable()
        require_tls_for_trust(use_tls, tls_trust)
        self.tls: ssl.SSLContext | None = client_context(tls_trust) if use_tls else None
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._max_frame_length = max_frame_length
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Task[Connection]] = {}
        self._closed = False

    async def connection(self, address: str, timeout_s: float | None = None) -> Connection:
        """The open connection to `address`, connecting if there is none."""
        if self._closed:
            raise RemotingConnectError(f"cannot connect to {address}: the client is closed")
        existing = self._connections.get(address)
        if existing is not None and not existing.closed:
            return existing
        task = self._connecting.get(address)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._connect(address))
            self._connecting[address] = task
            task.add_done_callback(lambda done: self._connect_done(address, done))
        timeout = self.connect_timeout_s if timeout_s is None else min(timeout_s, self.connect_timeout_s)
        if not await wait_until(task, timeout):  # the attempt goes on for other callers
            raise RemotingConnectError(f"cannot connect to {address}: no answer within {timeout:.3g} s")
        return task.result()

    async def _connect(self, address: str) -> Connection:
        host, port = split_address(address)
        loop = asyncio.get_running_loop()
        if self.tls is None:
            connecting = loop.create_connection(self._new_connection, host, port)
        else:  # the host dialled is the name checked: an IP address matches the certificate's IP SANs
            connecting = loop.create_connection(self._new_connection, host, port, ssl=self.tls, server_hostname=host)
        try:
            _, connection = await asyncio.wait_for(connecting, self.connect_timeout_s)
        except TimeoutError:
            raise RemotingConnectError(
                f"cannot connect to {address}: no answer within {self.connect_timeout_s:.3g} s"
            ) from None
        except ssl.SSLCertVerificationError as exc:
            if exc.verify_code in _NAME_MISMATCH:
                raise TlsHandshakeError(
                    f"cannot connect to {address} over TLS: its certificate does not name {host} ({exc.verify_message})"
                ) from None
            raise TlsHandshakeError(
                f"cannot connect to {address} over TLS: its certificate is not trusted ({exc.verify_message}); "
                "trust its CA with tls_trust='<CA file>'"
            ) from None
        except (ssl.SSLError, ConnectionResetError) as exc:
            if self.tls is None:
                raise RemotingConnectError(f"cannot connect to {address}: {exc.strerror or exc}") from None
            raise TlsHandshakeError(
                f"TLS handshake with {address} failed ({exc}); does the server accept TLS "
                "(tls.server.mode permissive or enforcing)?"
            ) from None
        except OSError as exc:
            raise RemotingConnectError(f"cannot connect to {address}: {exc.strerror or exc}") from None
        self._connections[address] = connection
        log.debug("connected to %s", address)
        return connection

    def _connect_done(self, address: str, task: asyncio.Task[Connection]) -> None:
        self._connecting.pop(address, None)
        if not task.cancelled():
            task.exception()  # retrieved here: every waiter may have given up already

    def _new_connection(self) -> Connection:
        return Connection(
            self.processors,
            max_frame_length=self._max_frame_length,
            idle_timeout_s=self._idle_timeout_s,
            on_close=self._connection_closed,
        )

    def _connection_closed(self, connection: Connection) -> None:
        for address, known in list(self._connections.items()):
            if known is connection:
                del self._connections[address]

    async def invoke(self, address: str, request: RemotingCommand, timeout_s: float | None = None) -> RemotingCommand:
        """Send `request` to `address` and return the response; the deadline covers connecting too."""
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        connection = await self.connection(address, timeout)
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise RemotingTimeoutError(f"request to {address} timed out while connecting")
        self._before_request(address, request)
        try:
            return await connection.invoke(request, remaining)
        except ConnectionClosedError as exc:
            if self.tls is not None or connection.received_any:
                raise
            raise TlsRequiredError(
                f"{code_name(request.code)} to {address}: the server closed the plain connection without any "
                f"answer; {TLS_REQUIRED_FIX}"
            ) from exc

    async def invoke_oneway(self, address: str, request: RemotingCommand, timeout_s: float | None = None) -> None:
        connection = await self.connection(address, timeout_s)
        self._before_request(address, request)
        connection.invoke_oneway(request)

    def _before_request(self, address: str, request: RemotingCommand) -> None:
        """The one place every request of this client passes before it is written."""
        if self.rpc_hook is not None:
            self.rpc_hook.before_request(address, request)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._connecting.values()):
            task.cancel()
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.close("client closing")
        for connection in connections:
            await connection.wait_closed()
