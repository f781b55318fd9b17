"""Counters the broker reports in GET_BROKER_RUNTIME_INFO, and what is sampled of them over time
(broker.stats_items): the store and pull rates, and the messages stored per topic."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields

from broker.stats_items import TOPIC_PUT_NUMS, RateSampler, Sampling, StatsItemSet


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
    #: messages put in consume queues (sends, retries, dead letters, delayed and ended transactional ones)
    stored_messages: int = 0
    topic_puts: StatsItemSet = field(default_factory=lambda: StatsItemSet(TOPIC_PUT_NUMS))
    sampling: Sampling = field(init=False)

    def __post_init__(self) -> None:
        self.sampling = Sampling(
            {"put": RateSampler(lambda: self.stored_messages), "get": RateSampler(self.pulled_messages)},
            [self.topic_puts],
        )

    def pulled_messages(self) -> int:
        return self.standard_pull_messages + self.arrow_pull_messages

    def stored(self, topic: str, count: int) -> None:
        """`count` messages of `topic` reached its consume queues (the store's arrival listener)."""
        self.stored_messages += count
        self.topic_puts.add(topic, count)

    def as_table(self) -> dict[str, str]:
        """The counters under camelCase keys, as RocketMQ's runtime info reports its figures."""
        table = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int):
                head, *rest = f.name.split("_")
                table[head + "".join(p.title() for p in rest)] = str(value)
        return table
