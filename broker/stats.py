"""Counters the broker reports in GET_BROKER_RUNTIME_INFO."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields


@dataclass(slots=True)
class BrokerStats:
    boot_timestamp: int = field(default_factory=lambda: int(time.time() * 1000))
    standard_send_requests: int = 0
    standard_send_messages: int = 0
    arrow_send_requests: int = 0
    arrow_send_messages: int = 0
    standard_pull_requests: int = 0
    standard_pull_messages: int = 0
    arrow_pull_requests: int = 0
    arrow_pull_messages: int = 0

    def as_table(self) -> dict[str, str]:
        """The counters under camelCase keys, as RocketMQ's runtime info reports its figures."""
        table = {}
        for f in fields(self):
            head, *rest = f.name.split("_")
            table[head + "".join(p.title() for p in rest)] = str(getattr(self, f.name))
        return table
