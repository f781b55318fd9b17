"""Headers of consumer-offset and queue-offset requests."""

from __future__ import annotations

from dataclasses import dataclass

from rocketspark.protocol.header import CommandHeader


@dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(CommandHeader):
    consumer_group: str
    topic: str
    queue_id: int
    set_zero_if_not_found: bool | None = None


@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(CommandHeader):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@dataclass(slots=True)
class QueueRequestHeader(CommandHeader):
    """GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) and GET_EARLIEST_MSG_STORETIME (32)."""

    topic: str
    queue_id: int
    committed: bool | None = None  # 5.x, GET_MAX_OFFSET only


@dataclass(slots=True)
class SearchOffsetRequestHeader(CommandHeader):
    topic: str
    queue_id: int
    timestamp: int
    boundary_type: str | None = None  # 5.x: LOWER (default) or UPPER


@dataclass(slots=True)
class OffsetResponseHeader(CommandHeader):
    """`offset` answers of QUERY_CONSUMER_OFFSET, GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET."""

    offset: int


@dataclass(slots=True)
class TimestampResponseHeader(CommandHeader):
    timestamp: int
