"""`OffsetRanges` (broker/pop/ranges.py) against a plain set, and what it makes a window cost."""

from __future__ import annotations

import itertools
import random

from broker.pop.queue_state import Delivery, QueueState
from broker.pop.ranges import OffsetRanges


def offsets(ranges: OffsetRanges) -> set[int]:
    return {o for start, end in ranges.ranges() for o in range(start, end)}


def test_ranges_hold_what_a_set_holds() -> None:
    rng = random.Random(43)
    for _ in range(200):
        ranges, model = OffsetRanges(), set()
        for _ in range(40):
            operation = rng.random()
            if operation < 0.5:
                offset = rng.randrange(100)
                ranges.add(offset)
                model.add(offset)
            elif operation < 0.8:
                start = rng.randrange(100)
                end = start + rng.randrange(10)
                ranges.add_range(start, end)
                model.update(range(start, end))
            elif operation < 0.9:
                low = rng.randrange(100)
                ranges.drop_below(low)
                model = {o for o in model if o >= low}
            else:
                base = min(model, default=0)
                end = ranges.take_prefix(base)
                run = 0
                while base + run in model:
                    run += 1
                assert end == base + run
                model -= set(range(base, base + run))
            assert offsets(ranges) == model
            spans = list(ranges.ranges())
            assert all(a_end < b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))
            probe = rng.randrange(110)
            assert (probe in ranges) == (probe in model)


def test_a_window_costs_its_gaps_not_its_acks() -> None:
    queue = QueueState(0)
    queue.deliver(Delivery(0, 0, 1, 1, 0))  # stays in flight
    for offset in range(1, 100_001):
        queue.deliver(Delivery(offset, offset, offset + 1, 1, 0))
        queue.finish(offset)
    assert queue.base == 0 and len(queue.done) == 1
    queue.finish(0)
    assert queue.base == 100_001 and len(queue.done) == 0
