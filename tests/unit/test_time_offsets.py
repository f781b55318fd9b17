"""The client's offset of a time (rocketspark.client.consumer.time_offsets.first_at_or_after) over a fake
broker whose time search answers Apache 4.9's nearest entry, and over the bundled broker's answer."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from broker.flavor import nearest_entry
from rocketspark.client.consumer.time_offsets import TIMES_PER_PULL, first_at_or_after


class FakeQueue:
    """Store times at offsets low, low + 1, ...; pulls answer at most `per_pull` of them."""

    def __init__(self, times: list[int], *, low: int = 0, per_pull: int = TIMES_PER_PULL) -> None:
        self.times = times
        self.low = low
        self.high = low + len(times)
        self.per_pull = per_pull
        self.reads = 0

    async def read_times(self, offset: int) -> Sequence[int]:
        assert self.low <= offset < self.high, offset
        self.reads += 1
        return self.times[offset - self.low : offset - self.low + self.per_pull]

    async def apache_answer(self, timestamp: int) -> int:
        async def store_time_at(offset: int) -> int:
            return self.times[offset - self.low]

        return await nearest_entry(store_time_at, self.low, self.high, timestamp)

    def bundled_answer(self, timestamp: int) -> int:
        return self.expected(timestamp)

    def expected(self, timestamp: int) -> int:
        """The first offset stored at or after the time, the max offset when none is."""
        return next((self.low + i for i, t in enumerate(self.times) if t >= timestamp), self.high)

    async def exact(self, hint: int, timestamp: int) -> int:
        return await first_at_or_after(timestamp, hint, self.low, self.high, self.read_times)


SAME_MILLISECOND = [100, 200, *[300] * 500, 400, 500]


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        (50, 0),  # before the oldest message
        (100, 0),
        (150, 1),
        (300, 2),  # the first of 500 messages stored in the same millisecond
        (250, 2),  # nearest: the previous message, 200
        (301, 502),  # nearest: the last of the 500
        (500, 503),
        (501, 504),  # past the newest message: the max offset, not the last message
    ],
)
async def test_steps_from_the_nearest_entry_to_the_first_at_or_after(timestamp: int, expected: int) -> None:
    queue = FakeQueue(SAME_MILLISECOND)
    assert await queue.exact(await queue.apache_answer(timestamp), timestamp) == expected


async def test_a_right_answer_or_its_neighbour_takes_one_pull() -> None:
    queue = FakeQueue([10, 20, 30, 40, 50])
    for timestamp in (5, 10, 24, 26, 40, 45, 50, 60):
        queue.reads = 0
        found = await queue.exact(await queue.apache_answer(timestamp), timestamp)
        assert found == queue.expected(timestamp)
        assert queue.reads == 1, timestamp
        queue.reads = 0
        assert await queue.exact(queue.bundled_answer(timestamp), timestamp) == found
        assert queue.reads == 1, timestamp


async def test_a_long_run_of_equal_times_takes_a_few_pulls() -> None:
    queue = FakeQueue([1, *[7] * 100_000, 9])
    assert await queue.exact(await queue.apache_answer(7), 7) == 1
    assert queue.reads <= 20


async def test_an_empty_queue_answers_its_max_offset() -> None:
    queue = FakeQueue([], low=12)
    assert await queue.exact(0, 5) == 12
    assert queue.reads == 0


@pytest.mark.parametrize("per_pull", [1, 3, TIMES_PER_PULL])
async def test_any_hint_over_random_queues(per_pull: int) -> None:
    """Whatever the broker answered (any offset of the queue, or past it), the offset is exact."""
    rng = random.Random(per_pull)
    for _ in range(200):
        times = sorted(rng.choices(range(0, 40, 2), k=rng.randint(1, 120)))
        queue = FakeQueue(times, low=rng.choice([0, 7]), per_pull=per_pull)
        timestamp = rng.randint(-3, 43)
        for hint in (await queue.apache_answer(timestamp), rng.randint(0, queue.high + 3)):
            assert await queue.exact(hint, timestamp) == queue.expected(timestamp), (times, timestamp, hint)
