"""A TCP relay in front of a real server that counts the request frames its clients send: how tests
see how often a Spark query asks the name servers, without a stand-in for any server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: a remoting frame starts with its length (big-endian int32), which does not count those 4 bytes
LENGTH_BYTES = 4


class CountingRelay:
    """Listens on 127.0.0.1 (a free port) and relays every connection to `target` ("host:port")."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self.frames = 0  # request frames relayed so far
        self.address = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="counting-relay", daemon=True)

    def start(self) -> None:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._relay, "127.0.0.1", 0), self._loop).result(
            timeout=10
        )
        self._server = server
        self.address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            relays = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in relays:
                task.cancel()
            await asyncio.gather(*relays, return_exceptions=True)
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(*self._target)
        try:
            await asyncio.gather(self._requests(client_reader, server_writer), self._pipe(server_reader, client_writer))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            client_writer.close()
            server_writer.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            length = await reader.readexactly(LENGTH_BYTES)
            frame = await reader.readexactly(int.from_bytes(length, "big"))
            self.frames += 1
            writer.write(length + frame)
            await writer.drain()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()


@contextmanager
def counting_relay(target: str) -> Iterator[CountingRelay]:
    relay = CountingRelay(target)
    relay.start()
    try:
        yield relay
    finally:
        relay.stop()
