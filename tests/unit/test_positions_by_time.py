"""Options of positions by time (startingOffsetsByTimestamp, endingOffsetsByTimestamp, the
strategy when no message is that new), parsed and checked: no Spark, no servers."""

from __future__ import annotations

import json

import pytest

from rocketspark.errors import ConfigError
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.options import Position, StartOrEnd, parse
from rocketspark.spark.source.positions import require_named_queues

BATCH = {"nameserver": "h:1", "topic": "T"}
STAMPS = json.dumps({"T": {"broker-a": {"0": 1000, "1": 2000}}})
A0, A1 = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)


def test_per_queue_times_with_kafkas_strategy_default() -> None:
    options = parse(
        {**BATCH, "startingOffsetsByTimestamp": STAMPS, "endingOffsetsByTimestamp": STAMPS}, streaming=False
    )
    assert options.starting == StartOrEnd(Position.TIMESTAMPS, ((A0, 1000), (A1, 2000)), fail_if_none_newer=True)
    assert options.ending == StartOrEnd(Position.TIMESTAMPS, ((A0, 1000), (A1, 2000)))
    latest = parse(
        {**BATCH, "startingOffsetsByTimestamp": STAMPS, "startingOffsetsByTimestampStrategy": "LATEST"}, streaming=False
    )
    assert not latest.starting.fail_if_none_newer


def test_a_global_time_fails_as_kafkas_unless_told_latest() -> None:
    assert parse({**BATCH, "startingTimestamp": "5"}, streaming=False).starting.fail_if_none_newer
    latest = parse({**BATCH, "startingTimestamp": "5", "startingOffsetsByTimestampStrategy": "latest"}, streaming=False)
    assert not latest.starting.fail_if_none_newer


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"startingOffsets": "earliest", "startingOffsetsByTimestamp": STAMPS},
            "startingOffsets or startingOffsetsByTimestamp, not both",
        ),
        ({"startingTimestamp": "1", "startingOffsetsByTimestamp": STAMPS, "startingOffsets": "latest"}, "only one"),
        ({"startingOffsetsByTimestamp": "{not json"}, "startingOffsetsByTimestamp is not valid JSON"),
        ({"startingOffsetsByTimestamp": json.dumps({"T": {"broker-a": {"0": -1}}})}, "timestampMs"),
        ({"startingOffsetsByTimestamp": STAMPS, "startingOffsetsByTimestampStrategy": "earliest"}, "error or latest"),
        (
            {"startingOffsetsByTimestampStrategy": "latest"},
            "applies with startingTimestamp or startingOffsetsByTimestamp",
        ),
    ],
)
def test_wrong_time_options_are_named(given: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse({**BATCH, **given}, streaming=False)


def test_ending_by_time_is_for_batch_reads() -> None:
    with pytest.raises(ConfigError, match="option endingOffsetsByTimestamp applies to batch reads"):
        parse({**BATCH, "consumerGroup": "g", "endingOffsetsByTimestamp": STAMPS}, streaming=True)


def test_a_time_for_a_queue_the_topic_does_not_have_is_named() -> None:
    options = parse({**BATCH, "startingOffsetsByTimestamp": STAMPS}, streaming=False)
    require_named_queues(options.starting, [A0, A1, MessageQueue("T", "broker-b", 0)], "startingOffsetsByTimestamp")
    with pytest.raises(
        ConfigError, match=r"startingOffsetsByTimestamp names queues the topics do not have: T@broker-a#1"
    ):
        require_named_queues(options.starting, [A0], "startingOffsetsByTimestamp")
