"""A stream's trigger limits beyond what Spark's `ReadLimit` carries for a Python source.

Spark passes a Python source only the one limit its `getDefaultReadLimit` returned (or
`ReadAllAvailable` for Trigger.Once), and its `ReadMinRows` has no delay. So the source reads its
limits from its own options (`TriggerLimits`) and uses Spark's limit only to tell whether limits
apply at all; `minMessagesPerTrigger` keeps its clock itself (`TriggerClock`). Combined as Kafka's
source combines them: first the lower limit decides whether a batch runs now, then the upper
limits (`maxMessagesPerTrigger`, `maxBytesPerTrigger`) cap the batch that runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rocketspark.protocol.queue import MessageQueue

#: Kafka's default maxTriggerDelay
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000


@dataclass(frozen=True, slots=True)
class TriggerLimits:
    max_messages: int | None = None  # maxMessagesPerTrigger
    max_bytes: int | None = None  # maxBytesPerTrigger, on the stored body sizes
    min_messages: int | None = None  # minMessagesPerTrigger
    max_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS  # maxTriggerDelay

    @property
    def any(self) -> bool:
        return self.max_messages is not None or self.max_bytes is not None or self.min_messages is not None


class TriggerClock:
    """When the last micro-batch ran, for minMessagesPerTrigger with maxTriggerDelay, kept as
    Kafka's source keeps its `lastTriggerMillis`.

    It lives in the stream reader on the driver, which Spark keeps for the whole run of a query
    (one long-lived Python process per source), so it spans micro-batches. Like Kafka's, it starts
    at 0 and lives in memory only (Spark keeps nothing of a Python source's but its offsets): the
    first trigger of every run, a restart from the checkpoint included, runs at once with what
    there is."""

    def __init__(self, min_messages: int, max_delay_ms: int) -> None:
        self.min_messages = min_messages
        self.max_delay_ms = max_delay_ms
        self.last_batch_ms = 0

    def delays(self, available: int, now_ms: int) -> bool:
        """Whether this trigger waits rather than runs with `available` new messages, as Kafka's
        `delayBatch`: it runs when maxTriggerDelay has passed since the clock last restarted, or
        with at least minMessagesPerTrigger new messages, and a trigger that runs restarts the
        clock, also when it finds nothing new (then Spark runs no batch)."""
        if now_ms - self.last_batch_ms >= self.max_delay_ms or available >= self.min_messages:
            self.last_batch_ms = now_ms
            return False
        return True


#: what `limit_bytes` asks the brokers: for each queue's (start, end, bytes), the first offset past
#: the messages from start whose stored body sizes add up to at most bytes (`QueueView.body_bytes`)
FitBytes = Callable[[Mapping[MessageQueue, tuple[int, int, int]]], dict[MessageQueue, int]]


def limit_bytes(
    begin: Mapping[MessageQueue, int], ends: dict[MessageQueue, int], max_bytes: int, fit: FitBytes
) -> dict[MessageQueue, int]:
    """maxBytesPerTrigger: `ends` cut so that the batch's stored bodies add up to at most
    `max_bytes`, shared over the queues that advance in proportion to the messages each would
    read, whole messages only. Every queue with a backlog whose broker answered takes at least one
    message, even when its share holds none (as Kafka's maxOffsetsPerTrigger rounds a share below
    one offset up, and Spark's file source takes one file larger than its maxBytesPerTrigger): so
    a small backlog beside a growing one is never starved, and a batch may pass `max_bytes` by up
    to one message per queue. A queue whose broker did not answer stays where it is."""
    backlog = {q: ends[q] - begin[q] for q in begin if ends.get(q, begin[q]) > begin[q]}
    total = sum(backlog.values())
    if not total:
        return ends
    reached = fit({q: (begin[q], ends[q], max_bytes * n // total) for q, n in backlog.items()})
    answered = {q: min(ends[q], max(begin[q] + 1, reached[q])) for q in backlog if q in reached}
    return {**ends, **{q: begin[q] for q in backlog}, **answered}


#: Spark's time suffixes (JavaUtils.timeStringAs), as multiples of a microsecond
_UNITS_US = {"us": 1, "ms": 1000, "s": 1_000_000, "m": 60_000_000, "min": 60_000_000, "h": 3_600_000_000}
_UNITS_US["d"] = 24 * _UNITS_US["h"]
_DURATION = re.compile(r"(-?[0-9]+)([a-z]+)?")


def parse_duration_ms(text: str) -> int:
    """A duration as Kafka's maxTriggerDelay takes it (Spark's JavaUtils.timeStringAsMs): after
    trimming and in any case, a whole number directly followed by a unit us, ms, s, m (or min), h
    or d, such as `15m` or `30s`; no unit means milliseconds; microseconds round toward zero.
    ValueError when it is none (a space between number and unit too, as Spark)."""
    matched = _DURATION.fullmatch(text.strip().lower())
    if matched is None or (matched.group(2) or "ms") not in _UNITS_US:
        raise ValueError(f"{text!r} is not a duration such as 15m, 30s or 500ms (us, ms, s, m, min, h or d)")
    micros = int(matched.group(1)) * _UNITS_US[matched.group(2) or "ms"]
    return abs(micros) // 1000 * (1 if micros >= 0 else -1)  # toward zero, as TimeUnit.convert
