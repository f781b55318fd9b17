"""What the broker knows about one client connection, whichever protocol the client speaks.

A 4.x client's channel is its remoting :class:`~rocketspark.remoting.connection.Connection`; a 5.x
client's is its gRPC session (broker/grpc/clients.py), which answers the few requests the broker
sends to clients (CHECK_TRANSACTION_STATE) on the client's Telemetry stream, as Apache's proxy does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rocketspark.protocol.codes import LanguageCode
from rocketspark.protocol.command import RemotingCommand


class ClientConnection(Protocol):
    """What the managers and the transaction check use of a client's connection."""

    @property
    def remote_address(self) -> str: ...

    def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send a request the client does not answer on the same channel."""
        ...

    def close(self, reason: str = ...) -> None: ...


@dataclass(slots=True)
class ClientChannelInfo:
    connection: ClientConnection
    client_id: str
    language: LanguageCode
    version: int
    last_update_ms: int
