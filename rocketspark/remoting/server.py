"""asyncio remoting server: accepts connections and serves them with a processor table."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from rocketspark.remoting.codec import DEFAULT_MAX_FRAME_LENGTH
from rocketspark.remoting.codes import SerializeType
from rocketspark.remoting.connection import DEFAULT_IDLE_TIMEOUT_S, Connection
from rocketspark.remoting.processor import ProcessorTable

log = logging.getLogger(__name__)


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
    ) -> None:
        self.processors = processors
        self._max_in_flight = max_in_flight_per_connection
        self.host = host
        self.port = port
        self._idle_timeout_s = idle_timeout_s
        self._max_frame_length = max_frame_length
        self._serialize_type = serialize_type
        self._server: asyncio.Server | None = None
        self.connections: set[Connection] = set()
        self._close_listeners: list[Callable[[Connection], None]] = []

    def add_close_listener(self, listener: Callable[[Connection], None]) -> None:
        self._close_listeners.append(listener)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self, *, serving: bool = True) -> None:
        """Bind the port (its number is known afterwards); accept connections unless `serving` is False."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection, self.host, self.port, reuse_address=True, start_serving=serving
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if serving:
            log.info("remoting server listening on %s", self.address)

    async def start_serving(self) -> None:
        """Begin accepting on a port bound with `start(serving=False)`."""
        assert self._server is not None
        await self._server.start_serving()
        log.info("remoting server listening on %s", self.address)

    def _new_connection(self) -> Connection:
        connection = Connection(
            self.processors,
            max_frame_length=self._max_frame_length,
            idle_timeout_s=self._idle_timeout_s,
            serialize_type=self._serialize_type,
            on_close=self._connection_closed,
            max_in_flight=self._max_in_flight,
        )
        self.connections.add(connection)
        return connection

    def _connection_closed(self, connection: Connection) -> None:
        self.connections.discard(connection)
        for listener in self._close_listeners:
            try:
                listener(connection)
            except Exception:
                log.exception("close listener failed for %s", connection)

    async def stop(self) -> None:
        """Stop accepting, close every connection and wait until they are gone."""
        if self._server is not None:
            self._server.close()
        connections = list(self.connections)
        for connection in connections:
            connection.close("server stopping")
        for connection in connections:
            await connection.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
