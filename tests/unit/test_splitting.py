"""Splitting queue ranges into partitions (minPartitions, maxRecordsPerPartition), in the manner of
Spark's KafkaOffsetRangeCalculatorSuite: no Spark, no servers."""

from __future__ import annotations

import random

import pytest

from rocketspark.errors import ConfigError
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.options import parse
from rocketspark.spark.source.planning import PartitionRules, plan_partitions
from rocketspark.spark.source.splitting import QueueRange, split_ranges


def rng(queue_id: int, start: int, end: int, broker: str = "broker-a") -> QueueRange:
    return QueueRange("T", broker, queue_id, start, end)


def spans(pieces: list[QueueRange]) -> list[tuple[int, int, int]]:
    return [(p.queue_id, p.start, p.end) for p in pieces]


def test_without_options_every_non_empty_range_stays_whole() -> None:
    ranges = [rng(0, 1, 2), rng(1, 1, 5), rng(2, 7, 7)]
    assert spans(split_ranges(ranges)) == [(0, 1, 2), (1, 1, 5)]  # the empty one dropped


def test_enough_ranges_for_min_partitions_are_not_split() -> None:
    ranges = [rng(0, 1, 2), rng(1, 1, 1000), rng(2, 1, 3)]
    assert spans(split_ranges(ranges, min_partitions=3)) == [(0, 1, 2), (1, 1, 1000), (2, 1, 3)]
    assert spans(split_ranges(ranges, min_partitions=2)) == [(0, 1, 2), (1, 1, 1000), (2, 1, 3)]


def test_one_range_to_min_partitions_pieces_the_last_taking_the_remainder() -> None:
    assert spans(split_ranges([rng(0, 0, 10)], min_partitions=3)) == [(0, 0, 3), (0, 3, 6), (0, 6, 10)]


def test_skewed_ranges_small_ones_stay_whole_large_ones_share_the_rest() -> None:
    ranges = [rng(0, 1, 101), rng(1, 1, 2)]
    assert spans(split_ranges(ranges, min_partitions=3)) == [(0, 1, 51), (0, 51, 101), (1, 1, 2)]
    ranges = [rng(0, 0, 700), rng(1, 0, 300), rng(2, 0, 10)]
    pieces = split_ranges(ranges, min_partitions=10)
    counts = {q: sum(1 for p in pieces if p.queue_id == q) for q in range(3)}
    assert counts == {0: 6, 1: 3, 2: 1}  # 9 partitions shared 700:300 after the small range


def test_rounding_never_leaves_fewer_than_min_partitions() -> None:
    ranges = [rng(0, 0, 5), rng(1, 0, 5), rng(2, 0, 5)]  # Kafka's rule keeps these three whole
    pieces = split_ranges(ranges, min_partitions=4)
    assert len(pieces) == 4 and spans(pieces)[:2] == [(0, 0, 2), (0, 2, 5)]


def test_fewer_offsets_than_min_partitions_give_one_piece_per_offset() -> None:
    assert spans(split_ranges([rng(0, 5, 8)], min_partitions=10)) == [(0, 5, 6), (0, 6, 7), (0, 7, 8)]


def test_max_records_cuts_long_ranges_into_the_fewest_near_equal_pieces() -> None:
    pieces = split_ranges([rng(0, 0, 10), rng(1, 0, 3)], max_records=3)
    assert spans(pieces) == [(0, 0, 2), (0, 2, 4), (0, 4, 7), (0, 7, 10), (1, 0, 3)]


def test_both_options_hold_together() -> None:
    pieces = split_ranges([rng(0, 0, 100), rng(1, 0, 20)], min_partitions=8, max_records=15)
    assert len(pieces) >= 8 and max(p.end - p.start for p in pieces) <= 15


@pytest.mark.parametrize("seed", range(40))
def test_every_offset_once_in_order_within_limits(seed: int) -> None:
    chance = random.Random(seed)
    ranges = []
    for queue_id in range(chance.randint(1, 6)):
        start = chance.randint(0, 10_000)
        ranges.append(rng(queue_id, start, start + chance.choice([0, 1, 2, 7, 50, 999, 6000])))
    min_partitions = chance.choice([None, 1, 3, 6, 17, 64])
    max_records = chance.choice([None, 1, 10, 500, 4000])
    pieces = split_ranges(ranges, min_partitions=min_partitions, max_records=max_records)
    covered = [(p.queue_id, o) for p in pieces for o in range(p.start, p.end)]
    assert covered == [(r.queue_id, o) for r in ranges for o in range(r.start, r.end)]  # once each, in order
    assert all(p.end > p.start for p in pieces)
    if max_records is not None:
        assert all(p.end - p.start <= max_records for p in pieces)
    total = sum(r.end - r.start for r in ranges)
    if min_partitions is not None:
        assert len(pieces) >= min(min_partitions, total)
    assert split_ranges(ranges, min_partitions=min_partitions, max_records=max_records) == pieces


def test_split_plans_one_piece_per_partition_the_same_every_time() -> None:
    queues = [MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-b", 0)]
    start = {queues[0]: 0, queues[1]: 100}
    end = {queues[0]: 3000, queues[1]: 3100}
    rules = PartitionRules(min_partitions=6)
    plan = plan_partitions(start, end, rules)
    assert [p.index for p in plan] == list(range(6))
    assert all(len(p.ranges) == 1 for p in plan)
    assert [(r.broker_name, r.start, r.end) for p in plan for r in p.ranges] == [
        ("broker-a", 0, 1000),
        ("broker-a", 1000, 2000),
        ("broker-a", 2000, 3000),
        ("broker-b", 100, 1100),
        ("broker-b", 1100, 2100),
        ("broker-b", 2100, 3100),
    ]
    assert plan_partitions(start, end, rules) == plan
    assert len(plan_partitions(start, end, PartitionRules(max_records=3000))) == 2


def test_options_name_the_partition_rules_and_refuse_num_partitions_with_them() -> None:
    base = {"nameserver": "h:1", "topic": "T"}
    options = parse({**base, "minPartitions": "6", "maxRecordsPerPartition": "1000"}, streaming=False)
    assert options.partitions == PartitionRules(min_partitions=6, max_records=1000)
    with pytest.raises(ConfigError, match="numPartitions"):
        parse({**base, "numPartitions": "2", "minPartitions": "6"}, streaming=False)
    with pytest.raises(ConfigError, match="maxRecordsPerPartition must be at least 1"):
        parse({**base, "maxRecordsPerPartition": "0"}, streaming=False)
