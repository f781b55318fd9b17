"""Service states of clients, as RocketMQ's `ServiceState`, with clear errors on misuse, and
`AsyncClient`: the `async with` every asyncio producer and consumer supports."""

from __future__ import annotations

import enum
from types import TracebackType
from typing import Self

from rocketspark.errors import RocketMQError


class ServiceState(enum.Enum):
    CREATE_JUST = "CREATE_JUST"
    RUNNING = "RUNNING"
    SHUTDOWN_ALREADY = "SHUTDOWN_ALREADY"
    START_FAILED = "START_FAILED"


class ClientStateError(RocketMQError):
    """A client used in the wrong state: started twice, or used before start or after shutdown."""


class Lifecycle:
    def __init__(self, what: str) -> None:
        self.what = what
        self.state = ServiceState.CREATE_JUST

    def begin_start(self) -> None:
        if self.state is not ServiceState.CREATE_JUST:
            raise ClientStateError(f"{self.what} cannot start: it is {self.state.name} (a client starts once)")

    def require_running(self) -> None:
        if self.state is not ServiceState.RUNNING:
            hint = "call start() first" if self.state is ServiceState.CREATE_JUST else "create a new one"
            raise ClientStateError(f"{self.what} is {self.state.name}, not RUNNING: {hint}")


class AsyncClient:
    """Base of the asyncio producers and consumers: `async with client:` starts it and shuts it down."""

    async def start(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()
