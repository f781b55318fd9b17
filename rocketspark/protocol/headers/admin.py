"""Headers of topic administration, statistics and message lookup."""

from __future__ import annotations

from dataclasses import dataclass

from rocketspark.protocol.header import CommandHeader


@dataclass(slots=True)
class CreateTopicRequestHeader(CommandHeader):
    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int | None = None
    order: bool = False
    attributes: str | None = None


@dataclass(slots=True)
class TopicRequestHeader(CommandHeader):
    """DELETE_TOPIC_IN_BROKER (215) and GET_TOPIC_STATS_INFO (202)."""

    topic: str


@dataclass(slots=True)
class GetConsumeStatsRequestHeader(CommandHeader):
    consumer_group: str
    topic: str | None = None


@dataclass(slots=True)
class QueryMessageRequestHeader(CommandHeader):
    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    end_timestamp: int


@dataclass(slots=True)
class QueryMessageResponseHeader(CommandHeader):
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


@dataclass(slots=True)
class ViewMessageRequestHeader(CommandHeader):
    offset: int
    topic: str | None = None


@dataclass(slots=True)
class ViewBrokerStatsDataRequestHeader(CommandHeader):
    """VIEW_BROKER_STATS_DATA (315): `statsName` (TOPIC_PUT_NUMS, ...) and its key (the topic)."""

    stats_name: str
    stats_key: str


@dataclass(slots=True)
class ResetOffsetRequestHeader(CommandHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and RESET_CONSUMER_CLIENT_OFFSET (220); `timestamp` -1:
    the max offsets. Java's field is `isForce`."""

    topic: str
    group: str
    timestamp: int
    is_force: bool = False
