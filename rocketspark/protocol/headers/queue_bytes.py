"""Headers of QUEUE_BODY_BYTES (31003), this project's extension that sums stored body sizes over a
queue's offsets (docs/protocol.md, "Extensions")."""

from __future__ import annotations

from dataclasses import dataclass

from rocketspark.protocol.header import CommandHeader


@dataclass(slots=True)
class QueueBodyBytesRequestHeader(CommandHeader):
    """From `offset` towards `end_offset` (exclusive): how far whole messages fit in `max_bytes`."""

    topic: str
    queue_id: int
    offset: int
    end_offset: int
    max_bytes: int


@dataclass(slots=True)
class QueueBodyBytesResponseHeader(CommandHeader):
    """`end_offset`: the first offset past the messages taken; `bytes`: their body sizes summed."""

    end_offset: int
    bytes: int
