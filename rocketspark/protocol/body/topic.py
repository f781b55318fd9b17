"""Topic configuration as brokers report it to name servers."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from rocketspark.protocol.body.jsonbody import JsonBody, loads


class Perm:
    """`PermName` bits: what clients may do with a topic's queues on a broker (plain ints: these
    are tested on every send and pull, where enum flags cost more than the test)."""

    INHERIT = 1
    WRITE = 2
    READ = 4
    PRIORITY = 8


DEFAULT_PERM = Perm.READ | Perm.WRITE


class TopicFilterType(enum.Enum):
    SINGLE_TAG = "SINGLE_TAG"
    MULTI_TAG = "MULTI_TAG"


@dataclass(slots=True)
class TopicConfig(JsonBody):
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = DEFAULT_PERM
    topic_filter_type: TopicFilterType = TopicFilterType.SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = field(default_factory=dict)

    def encode_compact(self) -> str:
        """Java's `TopicConfig.encode()`, used inside compressed registrations."""
        attributes = orjson.dumps(self.attributes).decode()
        return (
            f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} "
            f"{self.topic_filter_type.name} {attributes}"
        )

    @classmethod
    def decode_compact(cls, text: str) -> TopicConfig:
        parts = text.split(" ", 5)
        if len(parts) < 5:
            raise ValueError(f"compact topic config {text!r} has fewer than 5 fields")
        config = cls(
            topic_name=parts[0],
            read_queue_nums=int(parts[1]),
            write_queue_nums=int(parts[2]),
            perm=int(parts[3]),
            topic_filter_type=TopicFilterType[parts[4]],
        )
        if len(parts) == 6 and parts[5].strip():
            parsed: Any = loads(parts[5])
            config.attributes = {str(k): str(v) for k, v in (parsed or {}).items()}
        return config


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class DataVersion(JsonBody):
    """Version of a broker's topic configuration; name servers rebuild routes when it changes."""

    counter: int = 0
    state_version: int = 0
    timestamp: int = field(default_factory=_now_ms)

    def next(self) -> DataVersion:
        return DataVersion(self.counter + 1, self.state_version, max(_now_ms(), self.timestamp + 1))


@dataclass(slots=True)
class TopicConfigSerializeWrapper(JsonBody):
    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)


@dataclass(slots=True)
class TopicList(JsonBody):
    topic_list: list[str] = field(default_factory=list)
    broker_addr: str | None = None
