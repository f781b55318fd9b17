"""Pulls that touch many stored rounds (broker/store/log/scattered.py) answer what pulls of a few do.

Single sends to several queues share stored rounds, so a large pull of one queue takes a few
records of each of many rounds: read with the segment mapped and the records found for all rounds
at once (when they are not in the batch cache: the tests' stores cache one round). Each test reads
every queue whole in one pull and compares it, column by column and byte by byte, with the same
queue read a few messages a pull (rounds read one at a time); every read's rows (what a 5.x
receive takes) are its Arrow batches' rows.
"""

from __future__ import annotations

import asyncio
import itertools

import pyarrow as pa
import pytest

from broker.store.log import scattered
from broker.store.log.scattered import SCATTERED_ROUNDS, many_rounds_to_read, read_scattered
from broker.store.message_store import MessageStore
from broker.store.results import GetStatus
from rocketspark.errors import StoreCorruptionError
from rocketspark.message.batches.producer import producer_batch
from rocketspark.message.records.decoding import decode_records
from tests.store.conftest import STORE_HOST, StoreFactory, message

ALL = 1_000_000
_waves = itertools.count()
BIG = 64 * 1024 * 1024


async def send_waves(store: MessageStore, waves: int, per_queue: dict[int, int]) -> None:
    """`waves` rounds of concurrent single sends, `per_queue[q]` to queue q in each (each message
    with a key of its own: the duplicate window would drop a repeated one)."""
    for _ in range(waves):
        wave = next(_waves)
        sends = [
            store.put_messages(
                "T", queue, [message(f"w{wave}q{queue}n{n}".encode() * (n % 5 + 1), uniq=f"U{wave}.{queue}.{n}")]
            )
            for queue, count in per_queue.items()
            for n in range(count)
        ]
        await asyncio.gather(*sends)


async def read_whole(store: MessageStore, queue: int) -> tuple[pa.Table, bytes]:
    """The queue in one pull: (Arrow rows, standard records)."""
    result = await store.get_messages("T", queue, 0, max_messages=ALL, max_bytes=BIG)
    assert result.status is GetStatus.FOUND and result.next_begin_offset == store.max_offset("T", queue)
    assert result.rows() == pa.Table.from_batches(result.batches()).to_pylist()  # a 5.x receive's rows
    return pa.Table.from_batches(result.batches()), result.records(STORE_HOST)


async def read_in_small_pulls(store: MessageStore, queue: int, step: int = 3) -> tuple[pa.Table, bytes]:
    """The queue `step` messages a pull (a few rounds each)."""
    batches, records, offset = [], [], 0
    while offset < store.max_offset("T", queue):
        result = await store.get_messages("T", queue, offset, max_messages=step, max_bytes=BIG)
        assert result.status is GetStatus.FOUND
        entries = await store._entries(store.queues[("T", queue)], offset, step)
        assert not many_rounds_to_read(entries["batch_pos"], store.commit_log.is_cached)
        assert result.rows() == pa.Table.from_batches(result.batches()).to_pylist()
        batches += result.batches()
        records.append(result.records(STORE_HOST))
        offset = result.next_begin_offset
    return pa.Table.from_batches(batches), b"".join(records)


async def assert_whole_reads_match(store: MessageStore, queues: list[int]) -> None:
    for queue in queues:
        entries = await store._entries(store.queues[("T", queue)], 0, ALL)
        assert many_rounds_to_read(entries["batch_pos"], store.commit_log.is_cached)  # the whole read's path
        whole, whole_records = await read_whole(store, queue)
        small, small_records = await read_in_small_pulls(store, queue)
        assert whole.num_rows == store.max_offset("T", queue)
        assert whole.equals(small)
        assert whole_records == small_records
        assert [m.body for m in decode_records(whole_records)] == whole.column("body").to_pylist()


async def test_whole_queue_reads_of_rounds_shared_by_queues(open_store: StoreFactory) -> None:
    store = await open_store(batch_cache_bytes=1)
    await send_waves(store, 40, {0: 2, 1: 1, 2: 3})
    assert store.appender.rounds >= SCATTERED_ROUNDS
    await assert_whole_reads_match(store, [0, 1, 2])


async def test_arrow_batches_between_rounds_of_single_sends(open_store: StoreFactory) -> None:
    """Arrow-sent batches stored among the rounds come back as their rows, in queue order."""
    store = await open_store(batch_cache_bytes=1)
    for part in range(8):
        await send_waves(store, 4, {0: 2, 1: 2})
        bodies = [f"arrow{part}.{n}".encode() for n in range(5)]
        await store.put_arrow(
            "T", 0, producer_batch(pa.table({"body": bodies})), born_timestamp=1, born_host="10.0.0.1:1"
        )
    await assert_whole_reads_match(store, [0, 1])
    whole, _ = await read_whole(store, 0)
    assert whole.column("body").to_pylist()[8:13] == [f"arrow0.{n}".encode() for n in range(5)]


async def test_rounds_holding_many_records_of_the_queue(open_store: StoreFactory) -> None:
    """Rows deeper in a round than the records followed side by side: that round is parsed whole."""
    store = await open_store(batch_cache_bytes=1)
    await send_waves(store, 20, {0: 70, 1: 1})
    await assert_whole_reads_match(store, [0, 1])


async def test_reads_across_segments(open_store: StoreFactory) -> None:
    store = await open_store(mapped_file_size_commit_log=8 * 1024, batch_cache_bytes=1)
    await send_waves(store, 60, {0: 2, 1: 2, 2: 1})
    assert len(store.commit_log.segments) > 3
    await assert_whole_reads_match(store, [0, 1, 2])
    entries = await store._entries(store.queues[("T", 0)], 0, ALL)
    reads = [(segment, entries[at]) for segment, at in store.commit_log.segment_runs(entries["batch_pos"])]
    pieces = read_scattered(reads)
    assert len(reads) > 3 and len(pieces) == 1  # the records of every segment in one piece


async def test_a_span_larger_than_one_mapping_is_read_a_step_at_a_time(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds spanning more than MAPPED_SPAN_BYTES are read in steps of that much, the same rows."""
    store = await open_store(batch_cache_bytes=1)
    await send_waves(store, 40, {0: 2, 1: 1, 2: 3})
    steps: list[int] = []
    read_segment = scattered._read_segment

    def counted(segment, rounds, firsts, entries):  # type: ignore[no-untyped-def]
        steps.append(len(rounds))
        return read_segment(segment, rounds, firsts, entries)

    monkeypatch.setattr(scattered, "MAPPED_SPAN_BYTES", 2048)
    monkeypatch.setattr(scattered, "_read_segment", counted)
    await assert_whole_reads_match(store, [0, 1, 2])
    assert len(steps) > 10 and max(steps) < 40


async def test_rounds_in_the_batch_cache_are_taken_from_it(open_store: StoreFactory) -> None:
    """Rounds just written are in the cache: a whole-queue pull takes them from there."""
    store = await open_store()
    await send_waves(store, 40, {0: 2, 1: 1})
    entries = await store._entries(store.queues[("T", 0)], 0, ALL)
    assert not many_rounds_to_read(entries["batch_pos"], store.commit_log.is_cached)
    whole, whole_records = await read_whole(store, 0)
    assert whole.num_rows == 80 and [m.body for m in decode_records(whole_records)] == whole.column("body").to_pylist()


async def test_an_entry_naming_a_record_its_round_lacks_fails_the_read(open_store: StoreFactory) -> None:
    """A consume-queue entry whose row lies past its round's records (a corrupt entry) is an error
    the pull reports, not a read past the round."""
    store = await open_store(batch_cache_bytes=1)
    await send_waves(store, 40, {0: 2, 1: 1})
    tail = store.queues[("T", 0)]._tail.view()
    tail["row"][len(tail) // 2] = 3  # its round holds three records: rows 0 to 2
    with pytest.raises(StoreCorruptionError, match="fewer records"):
        await store.get_messages("T", 0, 0, max_messages=ALL, max_bytes=BIG)
