"""A recording proxy between a client (the real C++ client, a Spark query) and our servers: what
each side sent, frame by frame.

The client is given :attr:`WireRecorder.namesrv_address` as its name server. Route answers
(GET_ROUTEINFO_BY_TOPIC) are rewritten on the way back so that the broker's address in them names
the proxy's broker port, which brings the client's broker traffic through the proxy as well. Every
other byte is passed on unchanged; each frame is recorded with its JSON header exactly as it was
parsed from the wire (so numbers stay numbers) and its body.

The proxy runs its own event loop in a daemon thread, so tests that block on client subprocesses
can use it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from rocketspark.protocol.codes import RequestCode

_LENGTHS = struct.Struct(">ii")
_RESPONSE_FLAG = 0x1


@dataclass(frozen=True, slots=True)
class Frame:
    link: str  # "namesrv" or "broker"
    connection: int  # which client connection, numbered from 0 in accept order
    from_client: bool
    header: dict[str, Any]  # the JSON header as sent ({} when it is not JSON)
    body: bytes

    @property
    def code(self) -> int:
        return int(self.header.get("code", -1))

    @property
    def opaque(self) -> int:
        return int(self.header.get("opaque", -1))

    @property
    def is_response(self) -> bool:
        return bool(int(self.header.get("flag", 0)) & _RESPONSE_FLAG)

    @property
    def ext_fields(self) -> dict[str, Any]:
        return self.header.get("extFields") or {}

    def __str__(self) -> str:
        sender = "client" if self.from_client else self.link
        body = self.body[:300].decode(errors="backslashreplace")
        return f"{self.link}#{self.connection} from {sender}: {json.dumps(self.header)} body[{len(self.body)}]={body!r}"


def _split(frame: bytes) -> tuple[dict[str, Any], bytes, bytes]:
    """(parsed header, header bytes, body) of one whole frame."""
    _, type_and_length = _LENGTHS.unpack_from(frame)
    header_length = type_and_length & 0xFFFFFF
    raw_header = frame[8 : 8 + header_length]
    try:
        header = json.loads(raw_header)
    except ValueError:
        header = {}
    return header, raw_header, frame[8 + header_length :]


class WireRecorder:
    """Proxies one name server and one broker; see the module docstring."""

    def __init__(self, namesrv: str, broker: str) -> None:
        self.upstream = {"namesrv": namesrv, "broker": broker}
        self.namesrv_address = ""
        self.broker_address = ""
        self._frames: list[Frame] = []
        self._lock = threading.Lock()
        self._connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="wire-recorder", daemon=True)
        self._servers: list[asyncio.Server] = []
        self._writers: list[asyncio.StreamWriter] = []

    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    @property
    def frames(self) -> list[Frame]:
        with self._lock:
            return list(self._frames)

    def exchanges(self) -> list[tuple[Frame, Frame | None]]:
        """Each request with its response (None when none came back), in the order requests were sent."""
        requests: list[Frame] = []
        responses: dict[int, Frame] = {}  # index in `requests` -> response
        pending: dict[tuple[str, int, bool, int], int] = {}
        for frame in self.frames:
            if frame.is_response:  # it travels the other way from its request
                index = pending.pop((frame.link, frame.connection, not frame.from_client, frame.opaque), None)
                if index is not None:
                    responses[index] = frame
            else:
                pending[(frame.link, frame.connection, frame.from_client, frame.opaque)] = len(requests)
                requests.append(frame)
        return [(request, responses.get(index)) for index, request in enumerate(requests)]

    async def _listen(self) -> None:
        for link in ("namesrv", "broker"):
            server = await asyncio.start_server(functools.partial(self._accept, link), "127.0.0.1", 0)
            self._servers.append(server)
            address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
            if link == "namesrv":
                self.namesrv_address = address
            else:
                self.broker_address = address

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        for writer in self._writers:
            writer.close()
        for server in self._servers:
            await server.wait_closed()

    async def _accept(
        self, link: str, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        with self._lock:
            connection = self._connections
            self._connections += 1
        self._writers.append(client_writer)
        host, port = self.upstream[link].rsplit(":", 1)
        try:
            server_reader, server_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()
            return
        self._writers.append(server_writer)
        route_requests: set[int] = set()  # opaques of the client's GET_ROUTEINFO_BY_TOPIC requests

        def from_client(data: bytes) -> bytes:
            frame = self._record(link, connection, True, data)
            if frame.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and not frame.is_response:
                route_requests.add(frame.opaque)
            return data

        def from_server(data: bytes) -> bytes:
            header, raw_header, body = _split(data)
            if int(header.get("flag", 0)) & _RESPONSE_FLAG and header.get("opaque") in route_requests:
                route_requests.discard(header["opaque"])
                body = body.replace(self.upstream["broker"].encode(), self.broker_address.encode())
                data = _LENGTHS.pack(4 + len(raw_header) + len(body), len(raw_header)) + raw_header + body
            self._record(link, connection, False, data)
            return data

        await asyncio.gather(
            self._pump(client_reader, server_writer, from_client),
            self._pump(server_reader, client_writer, from_server),
            return_exceptions=True,
        )

    def _record(self, link: str, connection: int, from_client: bool, data: bytes) -> Frame:
        header, _, body = _split(data)
        frame = Frame(link, connection, from_client, header, body)
        with self._lock:
            self._frames.append(frame)
        return frame

    @staticmethod
    async def _pump(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, on_frame: Callable[[bytes], bytes]
    ) -> None:
        """Copy whole frames from `reader` to `writer`, passing each through `on_frame`."""
        try:
            while True:
                length = await reader.readexactly(4)
                rest = await reader.readexactly(int.from_bytes(length, "big"))
                writer.write(on_frame(length + rest))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
