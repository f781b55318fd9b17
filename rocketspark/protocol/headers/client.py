"""Headers of client registration requests."""

from __future__ import annotations

from dataclasses import dataclass, field

from rocketspark.protocol.header import CommandHeader
from rocketspark.protocol.schema import wire


@dataclass(slots=True)
class UnregisterClientRequestHeader(CommandHeader):
    client_id: str = field(metadata=wire("clientID"))
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(slots=True)
class ConsumerGroupRequestHeader(CommandHeader):
    """GET_CONSUMER_LIST_BY_GROUP (38) and NOTIFY_CONSUMER_IDS_CHANGED (40)."""

    consumer_group: str
