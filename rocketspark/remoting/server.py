"""asyncio remoting server: accepts connections and serves them with a processor table.

TLS and plain connections share the port (:mod:`rocketspark.remoting.tls`): the server accepts each
socket itself, peeks at the first byte the client sends (waiting at most `PEEK_TIMEOUT_S`, or the
idle timeout when shorter, so a silent peer does not hold a socket), refuses the kinds its mode does
not accept, and hands the socket to the event loop with or without TLS. At most `MAX_ADMITTING`
sockets may be waiting for their first byte: past it a new socket is closed at once, so silent peers
cannot pile up sockets.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

from rocketspark.protocol.codec import DEFAULT_MAX_FRAME_LENGTH
from rocketspark.protocol.codes import SerializeType
from rocketspark.remoting.connection import DEFAULT_IDLE_TIMEOUT_S, Connection
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.throttled_log import ThrottledLog
from rocketspark.remoting.tls import TLS_HANDSHAKE_RECORD, ServerTls, TlsMode

log = logging.getLogger(__name__)
#: sockets closed for sending nothing: one INFO line per 10 s
_silent_peers = ThrottledLog(log)

LISTEN_BACKLOG = 1024
#: a TLS client that has not finished its handshake this long after its first byte is dropped
TLS_HANDSHAKE_TIMEOUT_S = 30.0
#: how long a new socket may stay silent before its first byte
PEEK_TIMEOUT_S = 5.0
#: sockets accepted and not yet served (waiting for their first byte or TLS handshake) at most
MAX_ADMITTING = 256
#: a connection whose peer leaves this many bytes of answers unread is not read from until it reads them
MAX_UNSENT_BYTES = 1024 * 1024


class RemotingServer:
    """Listens on one address; every accepted connection dispatches to `processors`.

    `on_connection_closed` lets owners drop state tied to a connection (a name server forgets
    a broker whose connection closed; a broker forgets a client's channel).
    """

    def __init__(
        self,
        processors: ProcessorTable,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        serialize_type: SerializeType = SerializeType.JSON,
        max_in_flight_per_connection: int = 0,
        tls: ServerTls | None = None,
        peek_timeout_s: float = PEEK_TIMEOUT_S,
        max_admitting: int = MAX_ADMITTING,
    ) -> None:
        self.processors = processors
        self._peek_timeout_s = min(peek_timeout_s, idle_timeout_s) if idle_timeout_s > 0 else peek_timeout_s
        self._max_admitting = max_admitting
        self._refused_sockets = ThrottledLog(log, logging.WARNING)
        self._max_in_flight = max_in_flight_per_connection
        self.host = host
        self.port = port
        self._idle_timeout_s = idle_timeout_s
        self._max_frame_length = max_frame_length
        self._serialize_type = serialize_type
        self.tls = tls or ServerTls()
        self.tls.check_frame_length(max_frame_length)
        self._handshake_byte_is_tls = self.tls.handshake_byte_is_tls(max_frame_length)
        self._listeners: list[socket.socket] = []
        self._accepting: list[asyncio.Task[None]] = []
        self._admitting: set[asyncio.Task[None]] = set()
        self.connections: set[Connection] = set()
        self._close_listeners: list[Callable[[Connection], None]] = []

    def add_close_listener(self, listener: Callable[[Connection], None]) -> None:
        self._close_listeners.append(listener)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self, *, serving: bool = True) -> None:
        """Bind the port on every address the host name resolves to (`localhost`: 127.0.0.1 and ::1
        where both are configured), as asyncio's create_server does, all on one port number (the
        first one's, when port 0 asks for any); accept connections unless `serving` is False."""
        resolved = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        addresses = list(dict.fromkeys((family, address[:2]) for family, _, _, _, address in resolved))
        try:
            for family, (host, port) in addresses:
                listener = socket.create_server(
                    (host, port if not self._listeners else self.port), family=family, backlog=LISTEN_BACKLOG
                )
                self._listeners.append(listener)
                listener.setblocking(False)
                self.port = listener.getsockname()[1]
        except BaseException:
            self._close_listeners_now()
            raise
        if serving:
            await self.start_serving()

    async def start_serving(self) -> None:
        """Begin accepting on a port bound with `start(serving=False)`."""
        assert self._listeners
        loop = asyncio.get_running_loop()
        self._accepting = [loop.create_task(self._accept(listener)) for listener in self._listeners]
        log.info("remoting server listening on %s (TLS %s)", self.address, self.tls.mode.value)

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError as exc:  # out of descriptors, for one: keep serving those already open
                log.warning("accepting a connection on %s failed: %s", self.address, exc)
                await asyncio.sleep(0.1)
                continue
            if len(self._admitting) >= self._max_admitting:
                self._refused_sockets.log(
                    "sockets closed",
                    "closed a new connection from %s: %s sockets are still silent",
                    _peer_name(sock),
                    len(self._admitting),
                )
                sock.close()
                continue
            task = loop.create_task(self._admit(sock))
            self._admitting.add(task)
            task.add_done_callback(self._admitting.discard)

    async def _admit(self, sock: socket.socket) -> None:
        """Serve `sock` as TLS or plain by its first byte, or close it with a logged reason."""
        sock.setblocking(False)
        # small responses go out at once: connect_accepted_socket leaves Nagle's algorithm on
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = _peer_name(sock)
        try:
            first = await _first_byte(sock, self._peek_timeout_s)
            tls = first == TLS_HANDSHAKE_RECORD and self._handshake_byte_is_tls
            if first is None or not self._accepts(tls, peer):
                sock.close()
                return
            loop = asyncio.get_running_loop()
            if tls:
                _, connection = await loop.connect_accepted_socket(
                    self._new_connection, sock, ssl=self.tls.context, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S
                )
            else:
                _, connection = await loop.connect_accepted_socket(self._new_connection, sock)
        except OSError as exc:  # ssl.SSLError is one: a failed handshake
            log.info("connection from %s dropped before it was served: %s", peer, exc)
            sock.close()
            return
        except BaseException:
            sock.close()
            raise
        if not connection.closed:
            self.connections.add(connection)

    def _accepts(self, tls: bool, peer: str) -> bool:
        mode = self.tls.mode
        if tls and mode is TlsMode.DISABLED:
            log.warning("refused a TLS handshake from %s: TLS is disabled on %s (tls.server.mode)", peer, self.address)
            return False
        if not tls and mode is TlsMode.ENFORCING:
            log.warning("refused a plain connection from %s: tls.server.mode=enforcing requires TLS", peer)
            return False
        return True

    def _new_connection(self) -> Connection:
        return Connection(
            self.processors,
            max_frame_length=self._max_frame_length,
            idle_timeout_s=self._idle_timeout_s,
            serialize_type=self._serialize_type,
            on_close=self._connection_closed,
            max_in_flight=self._max_in_flight,
            max_unsent_bytes=MAX_UNSENT_BYTES,
        )

    def _connection_closed(self, connection: Connection) -> None:
        self.connections.discard(connection)
        for listener in self._close_listeners:
            try:
                listener(connection)
            except Exception:
                log.exception("close listener failed for %s", connection)

    def _close_listeners_now(self) -> None:
        for listener in self._listeners:
            listener.close()
        self._listeners = []

    async def stop(self) -> None:
        """Stop accepting, close every connection and wait until they are gone."""
        pending = [*self._accepting, *self._admitting]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self._accepting = []
        self._close_listeners_now()
        connections = list(self.connections)
        for connection in connections:
            connection.close("server stopping")
        for connection in connections:
            await connection.wait_closed()


async def _first_byte(sock: socket.socket, timeout_s: float) -> int | None:
    """The first byte `sock`'s peer sent, left unread; None when it closed or sent nothing in time."""
    loop = asyncio.get_running_loop()
    fd = sock.fileno()
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                try:
                    data = sock.recv(1, socket.MSG_PEEK)
                except (BlockingIOError, InterruptedError):
                    pass
                else:
                    return data[0] if data else None
                readable: asyncio.Future[None] = loop.create_future()
                loop.add_reader(fd, _set_once, readable)
                try:
                    await readable
                finally:
                    loop.remove_reader(fd)
    except TimeoutError:
        _silent_peers.log(
            "silent connections",
            "closing connection from %s: nothing received within %s s",
            _peer_name(sock),
            f"{timeout_s:.3g}",
        )
        return None
    except ConnectionError:
        return None


def _set_once(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _peer_name(sock: socket.socket) -> str:
    try:
        host, port, *_ = sock.getpeername()
    except OSError:
        return "?"
    return f"{host}:{port}"
