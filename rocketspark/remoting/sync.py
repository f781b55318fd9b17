"""Synchronous facade for callers without an event loop (Spark tasks, notebooks, scripts).

An :class:`EventLoopThread` runs an asyncio loop in a daemon thread; synchronous wrappers submit
coroutines to it and wait for their results. Any number of threads may call concurrently.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.client import RemotingClient

T = TypeVar("T")

# Margin on top of a coroutine's own deadline before the waiting thread gives up on it.
_RESULT_GRACE_S = 5.0


class EventLoopThread:
    """An asyncio event loop running forever in a daemon thread."""

    def __init__(self, name: str = "rocketspark-loop") -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()
        ready.wait()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run `coroutine` on the loop and wait for its result (at most `timeout_s` seconds)."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("EventLoopThread.run() called from its own loop thread: await instead")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


class SyncRemotingClient:
    """Thread-safe blocking wrapper around :class:`RemotingClient`."""

    def __init__(self, **client_options: Any) -> None:
        self._thread = EventLoopThread("rocketspark-remoting")

        async def create() -> RemotingClient:
            return RemotingClient(**client_options)

        self._client = self._thread.run(create())

    @property
    def client(self) -> RemotingClient:
        return self._client

    def invoke(self, address: str, request: RemotingCommand, timeout_s: float | None = None) -> RemotingCommand:
        timeout = self._client.request_timeout_s if timeout_s is None else timeout_s
        return self._thread.run(self._client.invoke(address, request, timeout), timeout + _RESULT_GRACE_S)

    def invoke_oneway(self, address: str, request: RemotingCommand, timeout_s: float | None = None) -> None:
        timeout = self._client.connect_timeout_s if timeout_s is None else timeout_s
        self._thread.run(self._client.invoke_oneway(address, request, timeout), timeout + _RESULT_GRACE_S)

    def close(self) -> None:
        try:
            self._thread.run(self._client.close(), _RESULT_GRACE_S)
        finally:
            self._thread.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
