"""Filters a batch read takes over from Spark (`DataSourceReader.pushFilters`).

A filter is taken only when the read guarantees it, so Spark need not check it again:

- `storeTimestamp` `>`, `>=`, `<`, `<=` (and `=`): each queue's range is cut at offsets looked up
  by time (the broker's search by store time) a margin (`TIME_MARGIN_MS`) outside the bounds, and
  the read drops every row outside the bounds. The margin keeps the cut from losing rows where the
  search is not exact: an Apache 4.x broker answers with the entry nearest the time (any one of
  several messages of the same ms, the last entry past the newest), and a broker's clock can step
  back, so store times are not always in offset order. The result is exact as long as no queue's
  store times step back by `TIME_MARGIN_MS` or more; a larger step can lose rows near the bounds;
- `queueId` `=` or `IN`: only those queues are planned;
- `queueOffset` `>`, `>=`, `<`, `<=`, `=`: every queue's range is cut to those offsets;
- `tags` `=` or `IN`: the broker's tag filter, intersected with the `tags` option (the client
  checks tags exactly; the broker filters by hash code only); only values the tag expression reads
  as that one tag (not empty, not `*`, no surrounding spaces, no `|`).

Every other filter, and these with values of another type, stay with Spark.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rocketspark.message.filter import parse_tag_expression
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.versions import FILTER_PUSHDOWN, has

if TYPE_CHECKING or has(FILTER_PUSHDOWN):  # PySpark 4.0 has no filters, and no read pushes any there
    from pyspark.sql.datasource import (
        EqualTo,
        Filter,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
    )

    _COMPARISONS = (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, EqualTo)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

#: how far outside the pushed time bounds the offsets are looked up (ms): the largest step back of
#: a broker's clock within a queue that cannot lose rows
TIME_MARGIN_MS = 1000


@dataclass(frozen=True, slots=True)
class Bounds:
    """A half-open interval [low, high) of whole numbers; None: unbounded on that side."""

    low: int | None = None
    high: int | None = None

    def meet(self, other: Bounds) -> Bounds:
        lows = [b for b in (self.low, other.low) if b is not None]
        highs = [b for b in (self.high, other.high) if b is not None]
        return Bounds(max(lows) if lows else None, min(highs) if highs else None)

    def contains(self, value: int) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value < self.high)


@dataclass(frozen=True, slots=True)
class Pushed:
    """What a batch read took over, as the read applies it."""

    store_time_us: Bounds = field(default_factory=Bounds)  # storeTimestamp, in µs
    offsets: Bounds = field(default_factory=Bounds)  # queueOffset
    queue_ids: frozenset[int] | None = None  # queueId
    tags: frozenset[str] | None = None  # tags
    taken: tuple[Filter, ...] = ()

    @property
    def store_time_ms(self) -> Bounds:
        """The time bounds in whole ms (RocketMQ's store times): a message stored at ms m has
        storeTimestamp m * 1000 µs."""
        low, high = self.store_time_us.low, self.store_time_us.high
        return Bounds(None if low is None else math.ceil(low / 1000), None if high is None else math.ceil(high / 1000))

    @property
    def time_lookups_ms(self) -> Bounds:
        """The times (ms) to look offsets up at: the time bounds widened by `TIME_MARGIN_MS`."""
        low, high = self.store_time_ms.low, self.store_time_ms.high
        return Bounds(None if low is None else low - TIME_MARGIN_MS, None if high is None else high + TIME_MARGIN_MS)

    def keeps(self, queue: MessageQueue) -> bool:
        return self.queue_ids is None or queue.queue_id in self.queue_ids

    def tag_expression(self, option: str) -> str | None:
        """The tags option narrowed to the pushed tags; None when no tag is left (nothing to read)."""
        if self.tags is None:
            return option
        subscribed = parse_tag_expression(option)
        tags = sorted(self.tags if subscribed is None else self.tags & set(subscribed))
        return " || ".join(tags) if tags else None


def push(filters: Iterable[Filter]) -> tuple[Pushed, list[Filter]]:
    """The filters the read takes over (as a `Pushed`) and those it leaves to Spark."""
    times, offsets = Bounds(), Bounds()
    queue_ids: frozenset[int] | None = None
    tags: frozenset[str] | None = None
    taken: list[Filter] = []
    left: list[Filter] = []
    for item in filters:
        column = item.attribute if isinstance(item, (*_COMPARISONS, In)) else ()
        values = _values(item)
        if column == ("storeTimestamp",) and isinstance(item, _COMPARISONS) and _is_time(item.value):
            times = times.meet(_compared(item, _micros(item.value)))
        elif column == ("queueOffset",) and isinstance(item, _COMPARISONS) and _is_int(item.value):
            offsets = offsets.meet(_compared(item, item.value))
        elif column == ("queueId",) and values is not None and all(map(_is_int, values)):
            queue_ids = frozenset(values) if queue_ids is None else queue_ids & frozenset(values)
        elif column == ("tags",) and values is not None and all(map(_is_plain_tag, values)):
            tags = frozenset(values) if tags is None else tags & frozenset(values)
        else:
            left.append(item)
            continue
        taken.append(item)
    return Pushed(times, offsets, queue_ids, tags, tuple(taken)), left


def _values(item: Filter) -> list[Any] | None:
    """The values an `=` or `IN` filter accepts (a null never equals anything); None for others."""
    if isinstance(item, EqualTo):
        return [item.value] if item.value is not None else []
    if isinstance(item, In):
        return [v for v in item.value if v is not None]
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_plain_tag(value: object) -> bool:
    """Whether the broker's tag expression reads `value` as that one tag: not empty, not `*`
    (every tag), no surrounding spaces (trimmed) and no `|` (`||` separates tags)."""
    return isinstance(value, str) and value not in ("", "*") and value == value.strip() and "|" not in value


def _is_time(value: object) -> bool:
    return isinstance(value, dt.datetime)


def _micros(value: dt.datetime) -> int:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    return (aware - _EPOCH) // dt.timedelta(microseconds=1)


def _compared(item: Filter, value: int) -> Bounds:
    """The whole numbers a comparison with `value` keeps, as [low, high)."""
    if isinstance(item, GreaterThan):
        return Bounds(low=value + 1)
    if isinstance(item, GreaterThanOrEqual):
        return Bounds(low=value)
    if isinstance(item, LessThan):
        return Bounds(high=value)
    if isinstance(item, LessThanOrEqual):
        return Bounds(high=value + 1)
    return Bounds(value, value + 1)  # EqualTo


def narrow(
    start: Mapping[MessageQueue, int],
    end: Mapping[MessageQueue, int],
    pushed: Pushed,
    by_time: Mapping[MessageQueue, tuple[int | None, int | None]],
) -> tuple[dict[MessageQueue, int], dict[MessageQueue, int]]:
    """The planned ranges cut to the pushed queues, offsets and the offsets `by_time` found for the
    widened time bounds (`Pushed.time_lookups_ms`): from the one found for the low bound to the one
    found for the high bound, that one included (an Apache broker may answer with an entry stored
    before the time); an empty range where nothing is left."""
    new_start: dict[MessageQueue, int] = {}
    new_end: dict[MessageQueue, int] = {}
    for queue in start:
        if not pushed.keeps(queue):
            continue
        low_time, high_time = by_time.get(queue, (None, None))
        lows = [start[queue], pushed.offsets.low, low_time]
        highs = [end[queue], pushed.offsets.high, None if high_time is None else high_time + 1]
        low = max(v for v in lows if v is not None)
        high = min(v for v in highs if v is not None)
        new_start[queue], new_end[queue] = low, max(low, high)
    return new_start, new_end
