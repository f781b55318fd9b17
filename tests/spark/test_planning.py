"""Options, offsets and planning of the Spark source, without Spark or servers."""

from __future__ import annotations

import json

import pytest

from rocketspark.errors import ConfigError
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark import versions
from rocketspark.spark.options import Position, parse
from rocketspark.spark.source import offsets as offset_dicts
from rocketspark.spark.source.planning import PartitionRules, limit_ends, plan_partitions

BASE = {"nameserver": "127.0.0.1:9876", "topic": "T", "consumerGroup": "g"}


def queues(count: int, broker: str = "broker-a", topic: str = "T") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(count)]


def test_options_are_case_insensitive_and_have_defaults() -> None:
    options = parse({"NameServer": "h:1;h:2", "TOPICS": "b, a", "consumergroup": "g"}, streaming=True)
    assert options.namesrv_addr == "h:1;h:2" and options.topics == ("a", "b")
    assert options.starting.position is Position.GROUP and options.fail_on_data_loss
    assert parse({"namesrvAddr": "h:1", "topic": "T"}, streaming=False).starting.position is Position.EARLIEST


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "T", "consumerGroup": "g"}, "nameserver is required"),
        ({"nameserver": "h:1", "consumerGroup": "g"}, "exactly one of the options topic, topics or topicPattern"),
        ({**BASE, "topics": "A,B"}, "got topic, topics"),
        ({"nameserver": "h:1", "topic": "T"}, "consumerGroup is required for streaming"),
        ({**BASE, "startingOffsets": "yesterday"}, "must be earliest or group or latest"),
        ({**BASE, "startingOffsets": "{not json"}, "not valid JSON"),
        ({**BASE, "startingOffsets": '{"T": {"b": {"x": 1}}}'}, "not a queue offset"),
        ({**BASE, "startingOffsets": "earliest", "startingTimestamp": "1"}, "not both"),
        ({**BASE, "maxMessagesPerTrigger": "0"}, "at least 1" if versions.has(versions.ADMISSION_CONTROL) else "4.2"),
        ({**BASE, "failOnDataLoss": "maybe"}, "true or false"),
        ({**BASE, "endingOffsets": "latest"}, "batch reads"),
        ({**BASE, "topicPattern": "(", "topic": None}, "regular expression"),
        ({**BASE, "nameserver": "nohost"}, "not host:port"),
        ({**BASE, "tags": "||"}, "names no tag"),
        ({**BASE, "colour": "blue"}, "unknown option colour"),
        ({**BASE, "topic": "bad topic"}, "characters"),
    ],
)
def test_bad_options_are_clear_errors(options: dict[str, str | None], message: str) -> None:
    given = {k: v for k, v in options.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        parse(given, streaming=True)


def test_starting_offsets_json() -> None:
    text = json.dumps({"T": {"broker-a": {"0": 5, "1": -2}}})
    options = parse({**BASE, "startingOffsets": text}, streaming=True)
    assert options.starting.offset_map() == {MessageQueue("T", "broker-a", 0): 5, MessageQueue("T", "broker-a", 1): -2}
    with pytest.raises(ConfigError, match="-2"):
        parse({"nameserver": "h:1", "topic": "T", "endingOffsets": text}, streaming=False)


def test_offset_dicts_are_canonical() -> None:
    offsets = {
        MessageQueue("b", "x", 10): 1,
        MessageQueue("a", "y", 2): 2,
        MessageQueue("a", "y", 10): 3,
        MessageQueue("a", "x", 1): 4,
    }
    text = json.dumps(offset_dicts.to_dict(offsets))
    assert text == '{"a": {"x": {"1": 4}, "y": {"2": 2, "10": 3}}, "b": {"x": {"10": 1}}}'
    assert offset_dicts.from_dict(json.loads(text)) == offsets


def test_partitions_follow_average_allocation_and_skip_empty_ones() -> None:
    qs = queues(8)
    end = {q: 10 for q in qs}
    start = {q: 0 for q in qs}
    plans = plan_partitions(start, end, PartitionRules(3))
    assert [[r.queue_id for r in p.ranges] for p in plans] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    start[qs[3]] = start[qs[4]] = start[qs[5]] = 10  # nothing new in partition 1's queues
    assert [p.index for p in plan_partitions(start, end, PartitionRules(3))] == [0, 2]
    assert len(plan_partitions(start, end, PartitionRules())) == 5  # one partition per queue, empty ones dropped
    assert len(plan_partitions({q: 0 for q in qs}, end, PartitionRules(99))) == 8  # at most one per queue


def test_read_limit_is_never_exceeded_and_shared_by_backlog() -> None:
    qs = queues(4)
    start = {q: 0 for q in qs}
    latest = {qs[0]: 1000, qs[1]: 100, qs[2]: 0, qs[3]: 10}
    ends = limit_ends(start, latest, 111)
    taken = {q: ends[q] - start[q] for q in qs}
    assert sum(taken.values()) == 111
    assert taken[qs[0]] == 100 and taken[qs[1]] == 10 and taken[qs[2]] == 0 and taken[qs[3]] == 1


def test_no_queue_with_backlog_starves_under_a_small_limit() -> None:
    qs = queues(8)
    position = {q: 0 for q in qs}
    latest = {q: 100 for q in qs}
    for _ in range(8):  # a limit of 3 over 8 equal queues: every queue advances within 3 batches
        ends = limit_ends(position, latest, 3)
        assert sum(ends[q] - position[q] for q in qs) == 3
        position = ends
    assert all(position[q] >= 2 for q in qs)
