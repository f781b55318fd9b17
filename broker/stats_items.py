"""Figures sampled over time, as Apache RocketMQ 4.9 samples them: what GET_BROKER_RUNTIME_INFO's
rates (`putTps`, `getTransferedTps`) and VIEW_BROKER_STATS_DATA's minute, hour and day figures read.

- `RateSampler` keeps one snapshot a second of a running total, the last 601 of them (Apache's
  StoreStatsService: `putTps` is "the rate over 10 s, over 60 s, over 600 s", each empty until that
  many snapshots were taken).
- `StatsItem` counts a value and the times it was added (Apache's StatsItem): snapshots every 10 s
  (the last 7: a minute), every 10 min (the last 7: an hour) and every hour (the last 25: a day); a
  figure is the sum between the first and last snapshot of its list, that sum per second, and the
  sum per addition.
- `StatsItemSet` holds the items of one name by key (Apache's StatsItemSet): an item exists from
  its first addition on, and none is known before (VIEW_BROKER_STATS_DATA answers "not exist").

`Sampling.tick()`, run once a second, takes every snapshot when it is due.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rocketspark.protocol.body.stats import BrokerStatsItem

#: VIEW_BROKER_STATS_DATA's name for the messages stored per topic (key: the topic)
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"

RATE_SNAPSHOTS = 601
RATE_WINDOWS_S = (10, 60, 600)
MINUTE_SNAPSHOTS, HOUR_SNAPSHOTS, DAY_SNAPSHOTS = 7, 7, 25
MINUTE_STEP_S, HOUR_STEP_S, DAY_STEP_S = 10, 600, 3600


def _now_ms() -> int:
    return int(time.time() * 1000)


class RateSampler:
    """A running total (`read()`) sampled once a second; its rate over the last N seconds."""

    def __init__(self, read: Callable[[], int]) -> None:
        self.read = read
        self._snapshots: deque[tuple[int, int]] = deque(maxlen=RATE_SNAPSHOTS)

    def sample(self, now_ms: int) -> None:
        self._snapshots.append((now_ms, self.read()))

    def rate(self, window: int) -> float | None:
        """Per second over the last `window` snapshots; None until there are more than `window`."""
        if len(self._snapshots) <= window:
            return None
        (start, first), (end, last) = self._snapshots[-(window + 1)], self._snapshots[-1]
        return (last - first) * 1000 / (end - start) if end > start else 0.0

    def describe(self) -> str:
        """Apache's `putTps` text: the 10 s, 60 s and 600 s rates separated by spaces (a rate not
        known yet is left empty)."""
        return " ".join("" if (rate := self.rate(w)) is None else repr(rate) for w in RATE_WINDOWS_S)


@dataclass(slots=True)
class _Snapshot:
    timestamp: int
    times: int
    value: int


@dataclass(slots=True)
class StatsItem:
    value: int = 0
    times: int = 0
    minute: deque[_Snapshot] = field(default_factory=lambda: deque(maxlen=MINUTE_SNAPSHOTS))
    hour: deque[_Snapshot] = field(default_factory=lambda: deque(maxlen=HOUR_SNAPSHOTS))
    day: deque[_Snapshot] = field(default_factory=lambda: deque(maxlen=DAY_SNAPSHOTS))

    def add(self, value: int, times: int = 1) -> None:
        self.value += value
        self.times += times

    def sample(self, snapshots: deque[_Snapshot], step_s: int, now_ms: int) -> None:
        if not snapshots:  # as Apache: the first list starts one step back, at zero
            snapshots.append(_Snapshot(now_ms - step_s * 1000, 0, 0))
        snapshots.append(_Snapshot(now_ms, self.times, self.value))

    @staticmethod
    def figure(snapshots: deque[_Snapshot]) -> BrokerStatsItem:
        if not snapshots:
            return BrokerStatsItem(0, 0.0, 0.0)
        first, last = snapshots[0], snapshots[-1]
        total = last.value - first.value
        elapsed = last.timestamp - first.timestamp
        added = last.times - first.times
        return BrokerStatsItem(
            total, total * 1000 / elapsed if elapsed > 0 else 0.0, total / added if added > 0 else 0.0
        )


class StatsItemSet:
    """The items of one stats name, by key."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.items: dict[str, StatsItem] = {}

    def add(self, key: str, value: int, times: int = 1) -> None:
        item = self.items.get(key)
        if item is None:
            item = self.items[key] = StatsItem()
        item.add(value, times)

    def get(self, key: str) -> StatsItem | None:
        return self.items.get(key)

    def forget(self, key: str) -> None:
        self.items.pop(key, None)


class Sampling:
    """Every rate and stats item of a broker, with the one clock that samples them."""

    def __init__(self, rates: dict[str, RateSampler], sets: list[StatsItemSet]) -> None:
        self.rates = rates
        self.sets = {s.name: s for s in sets}
        self._ticks = 0

    def tick(self, now_ms: int | None = None) -> None:
        """Once a second: the rates; every 10 s, 10 min and hour, the items' lists."""
        now = _now_ms() if now_ms is None else now_ms
        for rate in self.rates.values():
            rate.sample(now)
        due = [
            (snapshots, step)
            for snapshots, step in (("minute", MINUTE_STEP_S), ("hour", HOUR_STEP_S), ("day", DAY_STEP_S))
            if self._ticks % step == 0
        ]
        self._ticks += 1
        for stats in self.sets.values():
            for item in stats.items.values():
                for name, step in due:
                    item.sample(getattr(item, name), step, now)

    def item(self, name: str, key: str) -> StatsItem | None:
        stats = self.sets.get(name)
        return None if stats is None else stats.get(key)
