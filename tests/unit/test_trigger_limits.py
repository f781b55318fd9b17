"""The trigger limits' options and minMessagesPerTrigger's clock, against a given time: no Spark."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest

from rocketspark.errors import ConfigError
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.options import parse
from rocketspark.spark.source.trigger_limits import (
    FitBytes,
    TriggerClock,
    TriggerLimits,
    limit_bytes,
    parse_duration_ms,
)

STREAM = {"nameserver": "h:1", "topic": "T", "consumerGroup": "g"}


def test_a_batch_waits_for_the_minimum_then_runs_at_the_delay_as_kafkas() -> None:
    clock = TriggerClock(min_messages=100, max_delay_ms=30_000)
    now = 1_767_225_600_000  # ms since the epoch, as the clock is read
    assert not clock.delays(5, now_ms=now + 1_000)  # a run's first trigger runs at once (Kafka's clock starts at 0)
    assert clock.delays(99, now_ms=now + 2_000) and clock.delays(10, now_ms=now + 30_999)
    assert not clock.delays(10, now_ms=now + 31_000)  # the delay passed since the clock restarted
    assert clock.delays(10, now_ms=now + 31_001)
    assert not clock.delays(100, now_ms=now + 32_000)  # enough messages: at once, and the clock restarts
    assert clock.delays(10, now_ms=now + 61_999)
    assert not clock.delays(0, now_ms=now + 62_000)  # the delay ran out with nothing new: the clock restarts too
    assert clock.delays(10, now_ms=now + 91_999) and clock.last_batch_ms == now + 62_000


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("15m", 900_000),
        ("30S", 30_000),
        (" 500ms ", 500),
        ("250", 250),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("3min", 180_000),
        ("2500us", 2),
        ("-3s", -3000),
    ],
)
def test_durations_as_kafka_takes_them(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "m", "1.5s", "1 d", "30 s", "10 years", "5w", "+5s"])
def test_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration_ms(text)


def test_trigger_options_with_kafkas_names_and_defaults() -> None:
    limits = parse({**STREAM, "minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "500"}, streaming=True).trigger
    assert limits == TriggerLimits(max_messages=500, min_messages=50, max_delay_ms=15 * 60_000)
    limits = parse({**STREAM, "minMessagesPerTrigger": "5", "maxTriggerDelay": "30s"}, streaming=True).trigger
    assert limits.min_messages == 5 and limits.max_delay_ms == 30_000
    assert parse({**STREAM, "maxBytesPerTrigger": "1048576"}, streaming=True).trigger.max_bytes == 1_048_576
    assert not parse(STREAM, streaming=True).trigger.any


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay: 'soon' is not a duration"),
        ({"minMessagesPerTrigger": "5", "maxTriggerDelay": "soon"}, "maxTriggerDelay: 'soon' is not a duration"),
        ({"minMessagesPerTrigger": "5", "minOffsetsPerTrigger": "5"}, "mean the same thing"),
        ({"maxBytesPerTrigger": "0"}, "maxBytesPerTrigger must be at least 1"),
    ],
)
def test_wrong_trigger_options_are_named(given: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse({**STREAM, **given}, streaming=True)


def test_max_trigger_delay_without_a_minimum_is_ignored_with_a_warning_as_kafka_ignores_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="rocketspark.spark.options"):
        limits = parse({**STREAM, "maxTriggerDelay": "30s"}, streaming=True).trigger
    assert limits == TriggerLimits() and not limits.any
    assert "maxTriggerDelay is ignored: it applies with minMessagesPerTrigger" in caplog.text


def test_trigger_options_of_streams_only() -> None:
    with pytest.raises(ConfigError, match="minMessagesPerTrigger applies to streaming reads"):
        parse({"nameserver": "h:1", "topic": "T", "minMessagesPerTrigger": "5"}, streaming=False)


Q0, Q1, Q2 = (MessageQueue("T", "broker-a", i) for i in range(3))


def fit_sizes(sizes: dict[MessageQueue, list[int]], asked: list[dict[MessageQueue, tuple[int, int, int]]]) -> FitBytes:
    """What a broker answers for queues whose message at offset i has body size sizes[q][i]."""

    def fit(ranges: Mapping[MessageQueue, tuple[int, int, int]]) -> dict[MessageQueue, int]:
        asked.append(dict(ranges))
        reached = {}
        for queue, (start, end, budget) in ranges.items():
            offset, used = start, 0
            while offset < end and used + sizes[queue][offset] <= budget:
                used += sizes[queue][offset]
                offset += 1
            reached[queue] = offset
        return reached

    return fit


def test_max_bytes_shares_the_budget_by_messages_to_read_whole_messages_only() -> None:
    asked: list[dict[MessageQueue, tuple[int, int, int]]] = []
    sizes = {Q0: [100] * 50, Q1: [10] * 50, Q2: [1] * 50}
    begin = {Q0: 0, Q1: 0, Q2: 50}
    ends = limit_bytes(begin, {Q0: 30, Q1: 10, Q2: 50}, 1000, fit_sizes(sizes, asked))
    assert asked == [{Q0: (0, 30, 750), Q1: (0, 10, 250)}]  # Q2 has nothing to read
    assert ends == {Q0: 7, Q1: 10, Q2: 50}  # 700 + 100 bytes
    asked.clear()
    assert limit_bytes(begin, {Q0: 0, Q1: 0, Q2: 50}, 1000, fit_sizes(sizes, asked)) == {Q0: 0, Q1: 0, Q2: 50}
    assert asked == []  # nothing to read: nothing asked


def test_max_bytes_below_one_message_still_moves_every_backlog_by_one() -> None:
    sizes = {Q0: [500] * 10, Q1: [500] * 10}
    ends = limit_bytes({Q0: 2, Q1: 0}, {Q0: 10, Q1: 5}, 100, fit_sizes(sizes, []))
    assert ends == {Q0: 3, Q1: 1}


def test_max_bytes_never_starves_a_small_queue_beside_a_growing_one() -> None:
    """Q1 holds 3 messages; Q0's backlog grows faster than the batches read it, so Q1's share by
    messages rounds down to no byte at all: still every batch takes one of Q1's messages."""
    sizes = {Q0: [10] * 100_000, Q1: [10] * 3}
    begin = {Q0: 0, Q1: 0}
    for batch in range(1, 4):
        ends = limit_bytes(begin, {Q0: 10_000 * batch, Q1: 3}, 500, fit_sizes(sizes, []))
        assert ends[Q1] == batch and ends[Q0] > begin[Q0]
        begin = ends


def test_max_bytes_keeps_a_queue_whose_broker_did_not_answer() -> None:
    def fit(ranges: Mapping[MessageQueue, tuple[int, int, int]]) -> dict[MessageQueue, int]:
        return {Q0: ranges[Q0][0] + 4}  # Q1's broker is silent

    assert limit_bytes({Q0: 0, Q1: 0}, {Q0: 10, Q1: 10}, 100, fit) == {Q0: 4, Q1: 0}
