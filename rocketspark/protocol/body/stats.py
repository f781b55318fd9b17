"""Statistics bodies whose maps are keyed by MessageQueue, and VIEW_BROKER_STATS_DATA's figures.

Java's fastjson writes such maps with the queue object itself as the key, which is not standard
JSON; Java tools expect exactly that, so these bodies write it, and read it back through the
fastjson-tolerant reader (which turns each key into the text of the queue object).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

import orjson

from rocketspark.protocol.body.jsonbody import JsonBody, loads
from rocketspark.protocol.queue import MessageQueue

V = TypeVar("V")


def _mq_keyed_json(table: Mapping[MessageQueue, JsonBody | int], extra: dict[str, Any]) -> bytes:
    entries = ",".join(
        orjson.dumps(mq.to_dict(), option=orjson.OPT_SORT_KEYS).decode()
        + ":"
        + (str(value) if isinstance(value, int) else value.to_json().decode())
        for mq, value in sorted(table.items())
    )
    head = "".join(f"{orjson.dumps(k).decode()}:{orjson.dumps(v).decode()}," for k, v in extra.items())
    return ("{" + head + '"offsetTable":{' + entries + "}}").encode()


def _mq_keyed_table(data: bytes, value: Callable[[Any], V]) -> tuple[dict[MessageQueue, V], dict[str, Any]]:
    """The body's `offsetTable`, each value read with `value`, and the whole body parsed."""
    parsed = loads(data)
    table = {
        MessageQueue.from_dict(loads(key)): value(entry) for key, entry in (parsed.get("offsetTable") or {}).items()
    }
    return table, parsed


@dataclass(slots=True)
class TopicOffset(JsonBody):
    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0


@dataclass(slots=True)
class TopicStatsTable:
    """GET_TOPIC_STATS_INFO (202) body."""

    offset_table: dict[MessageQueue, TopicOffset] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return _mq_keyed_json(dict(self.offset_table), {})

    @classmethod
    def from_json(cls, data: bytes) -> Self:
        table, _ = _mq_keyed_table(data, TopicOffset.from_dict)
        return cls(table)


@dataclass(slots=True)
class OffsetWrapper(JsonBody):
    broker_offset: int = 0
    consumer_offset: int = 0
    pull_offset: int = 0
    last_timestamp: int = 0


@dataclass(slots=True)
class ConsumeStats:
    """GET_CONSUME_STATS (208) body: per queue, the broker's max offset and the group's offset."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    @property
    def lag(self) -> int:
        return sum(max(0, w.broker_offset - w.consumer_offset) for w in self.offset_table.values())

    def to_json(self) -> bytes:
        return _mq_keyed_json(dict(self.offset_table), {"consumeTps": self.consume_tps})

    @classmethod
    def from_json(cls, data: bytes) -> Self:
        table, parsed = _mq_keyed_table(data, OffsetWrapper.from_dict)
        return cls(table, float(parsed.get("consumeTps") or 0.0))


@dataclass(slots=True)
class ResetOffsetBody:
    """INVOKE_BROKER_TO_RESET_OFFSET's (222) answer and RESET_CONSUMER_CLIENT_OFFSET's (220)
    body: per queue, the offset a group is reset to."""

    offset_table: dict[MessageQueue, int] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return _mq_keyed_json(dict(self.offset_table), {})

    @classmethod
    def from_json(cls, data: bytes) -> Self:
        table, _ = _mq_keyed_table(data, int)
        return cls(table)


@dataclass(slots=True)
class BrokerStatsItem(JsonBody):
    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


@dataclass(slots=True)
class BrokerStatsData(JsonBody):
    """VIEW_BROKER_STATS_DATA (315) body: one stats item over the last minute, hour and day."""

    stats_minute: BrokerStatsItem = field(default_factory=BrokerStatsItem)
    stats_hour: BrokerStatsItem = field(default_factory=BrokerStatsItem)
    stats_day: BrokerStatsItem = field(default_factory=BrokerStatsItem)
