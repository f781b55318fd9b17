"""UNIQ_KEYs from `UniqueIdGenerator`: unique for any batch size and rate, in Java's format."""

from __future__ import annotations

import re
import threading
import time

import pyarrow.compute as pc

from rocketspark.message.ids import UniqueIdGenerator, _month_start_ms

HEX_ID = re.compile(r"[0-9A-F]{32}")


def test_a_million_ids_of_one_call_are_distinct() -> None:
    ids = UniqueIdGenerator("10.1.2.3").next_many(1_000_000)
    assert len(ids) == 1_000_000
    assert pc.count_distinct(ids).as_py() == 1_000_000


def test_ids_of_back_to_back_calls_and_threads_are_distinct() -> None:
    generator = UniqueIdGenerator("10.1.2.3")
    batches = [generator.next_many(50_000) for _ in range(10)]  # far more than 65,536 within milliseconds
    singles: list[str] = []

    def take_singles() -> None:
        singles.extend(generator.next() for _ in range(20_000))

    threads = [threading.Thread(target=take_singles) for _ in range(4)]
    for thread in threads:
        thread.start()
    batches.append(generator.next_many(100_000))
    for thread in threads:
        thread.join(timeout=30)
    everything = [i for batch in batches for i in batch.to_pylist()] + singles
    assert len(everything) == 680_000
    assert len(set(everything)) == 680_000


def test_ids_keep_java_layout_and_track_the_clock() -> None:
    before = int(time.time() * 1000)
    generator = UniqueIdGenerator("10.1.2.3")
    single, many = generator.next(), generator.next_many(3).to_pylist()
    after = int(time.time() * 1000)
    month_start, _ = _month_start_ms(after)
    for uniq_key in [single, *many]:
        assert HEX_ID.fullmatch(uniq_key)
        assert uniq_key.startswith("0A010203")  # the client IP
        elapsed = int(uniq_key[20:28], 16)
        assert before - month_start <= elapsed <= after - month_start
    assert [int(k[28:], 16) for k in [single, *many]] == [0, 1, 2, 3]
