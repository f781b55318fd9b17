"""Apache 4.9's time search (broker.flavor.nearest_entry) over lists of store times."""

from __future__ import annotations

import random

import pytest

from broker.flavor import nearest_entry


async def nearest(times: list[int], timestamp: int, low: int = 0) -> int:
    """The search over `times` stored at offsets low, low + 1, ..."""

    async def store_time_at(offset: int) -> int:
        assert low <= offset < low + len(times), offset
        return times[offset - low]

    return await nearest_entry(store_time_at, low, low + len(times), timestamp)


TIMES = [10, 20, 20, 20, 30, 40]


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        (5, 0),  # before the oldest: the first entry
        (10, 0),
        (50, 5),  # past the newest: the last entry (max - 1)
        (40, 5),
        (20, 2),  # an exact hit: where the search lands, not the first of the equal times (1)
        (24, 3),  # nearer the earlier neighbour
        (26, 4),  # nearer the later one
        (25, 3),  # as near both: the earlier
        (35, 4),  # as near both, the later a probe of its own
    ],
)
async def test_nearest_entry_of_a_queue(timestamp: int, expected: int) -> None:
    assert await nearest(TIMES, timestamp) == expected


async def test_offsets_start_at_the_queue_minimum() -> None:
    assert await nearest(TIMES, 20, low=100) == 102
    assert await nearest(TIMES, 5, low=100) == 100
    assert await nearest(TIMES, 99, low=100) == 105


async def test_an_empty_queue_answers_its_minimum() -> None:
    assert await nearest([], 20, low=7) == 7


async def test_one_entry_answers_itself() -> None:
    assert [await nearest([10], t) for t in (5, 10, 15)] == [0, 0, 0]


async def test_answers_the_nearer_neighbour_or_an_exact_hit() -> None:
    """Random queues: an entry stored at the time when one is; else the nearer of the last entry
    before the time and the first after it, ties to the earlier; the first or last at either end."""
    rng = random.Random(39)
    for _ in range(300):
        times = sorted(rng.choices(range(0, 60, 3), k=rng.randint(1, 40)))
        timestamp = rng.randint(-5, 65)
        answer = await nearest(times, timestamp)
        if timestamp in times:
            assert times[answer] == timestamp
            continue
        before = [i for i, t in enumerate(times) if t < timestamp]
        after = [i for i, t in enumerate(times) if t > timestamp]
        if not before:
            assert answer == 0
        elif not after:
            assert answer == len(times) - 1
        else:
            left, right = before[-1], after[0]
            assert answer == (right if timestamp - times[left] > times[right] - timestamp else left)
