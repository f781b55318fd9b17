"""What the broker knows about one client connection."""

from __future__ import annotations

from dataclasses import dataclass

from rocketspark.protocol.codes import LanguageCode
from rocketspark.remoting.connection import Connection


@dataclass(slots=True)
class ClientChannelInfo:
    connection: Connection
    client_id: str
    language: LanguageCode
    version: int
    last_update_ms: int
