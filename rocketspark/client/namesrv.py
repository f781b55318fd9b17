"""Requests to name servers, with failover to the next one in the list."""

from __future__ import annotations

import logging

from rocketspark.errors import RemotingConnectError, RemotingError
from rocketspark.protocol.command import RemotingCommand, next_opaque
from rocketspark.remoting.client import RemotingClient

log = logging.getLogger(__name__)


class NameServerList:
    """Keeps using the name server that last answered; moves on when one cannot be reached."""

    def __init__(self, remoting: RemotingClient, addresses: tuple[str, ...]) -> None:
        self.remoting = remoting
        self.addresses = addresses
        self._current = 0

    @property
    def current(self) -> str:
        return self.addresses[self._current]

    async def invoke(self, request: RemotingCommand, timeout_s: float | None = None) -> RemotingCommand:
        """The first answer from the name servers, starting with the current one.

        A transport failure (unreachable, timed out, connection lost) moves to the next; when every
        name server failed, the error names each one and why.
        """
        failures: list[str] = []
        for attempt in range(len(self.addresses)):
            index = (self._current + attempt) % len(self.addresses)
            address = self.addresses[index]
            request.opaque = next_opaque()  # a fresh id per attempt
            try:
                response = await self.remoting.invoke(address, request, timeout_s)
            except RemotingError as exc:
                failures.append(f"{address}: {exc}")
                continue
            if index != self._current:
                log.info("switched to name server %s", address)
                self._current = index
            return response
        raise RemotingConnectError(f"no name server answered ({'; '.join(failures)})")
