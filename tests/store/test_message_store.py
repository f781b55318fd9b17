"""The message store in process: append, read, group commit, recovery, retention, lookups."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from broker.store.config import FlushDiskType
from broker.store.log.commitlog import MAP_FROM_BYTES, segment_name
from broker.store.message_store import MessageStore
from broker.store.results import GetStatus
from rocketspark.message.batches.producer import producer_batch
from rocketspark.message.hashing import java_string_hash
from rocketspark.message.ids import decode_offset_msg_id, offset_msg_id
from rocketspark.message.records.decoding import decode_records
from tests.store.conftest import STORE_HOST, StoreFactory, message

ALL = 1_000_000
BIG = 64 * 1024 * 1024


async def read_all(store: MessageStore, topic: str, queue_id: int, offset: int = 0) -> pa.Table:
    pieces = []
    while True:
        result = await store.get_messages(topic, queue_id, offset, max_messages=ALL, max_bytes=BIG)
        if result.status is not GetStatus.FOUND:
            break
        pieces.extend(result.batches())
        offset = result.next_begin_offset
    return pa.Table.from_batches(pieces) if pieces else pa.table({"queue_offset": pa.array([], pa.int64())})


async def test_append_and_read_dense_offsets(open_store: StoreFactory) -> None:
    store = await open_store()
    first = await store.put_messages("T", 0, [message(b"a"), message(b"b")])
    second = await store.put_messages("T", 0, [message(b"c")])
    other = await store.put_messages("T", 1, [message(b"x", tags="TagA", keys="k1 k2")])
    assert (first.first_queue_offset, first.count, second.first_queue_offset) == (0, 2, 2)
    assert other.first_queue_offset == 0
    table = await read_all(store, "T", 0)
    assert table.column("body").to_pylist() == [b"a", b"b", b"c"]
    assert table.column("queue_offset").to_pylist() == [0, 1, 2]
    assert len(set(table.column("commit_log_offset").to_pylist())) == 3
    row = (await read_all(store, "T", 1)).to_pylist()[0]
    assert row["tags"] == "TagA" and row["keys"] == "k1 k2" and row["born_host"] == "127.0.0.1:5555"
    assert row["msg_id"] == offset_msg_id(STORE_HOST, row["commit_log_offset"])
    assert (store.min_offset("T", 0), store.max_offset("T", 0), store.max_offset("T", 9)) == (0, 3, 0)


async def test_get_statuses_follow_rocketmq(open_store: StoreFactory) -> None:
    store = await open_store()
    assert (
        await store.get_messages("T", 0, 0, max_messages=32, max_bytes=BIG)
    ).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    await store.put_messages("T", 0, [message(b"a"), message(b"b")])
    at_end = await store.get_messages("T", 0, 2, max_messages=32, max_bytes=BIG)
    assert (at_end.status, at_end.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 2)
    beyond = await store.get_messages("T", 0, 9, max_messages=32, max_bytes=BIG)
    assert (beyond.status, beyond.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 0)
    limited = await store.get_messages("T", 0, 0, max_messages=1, max_bytes=BIG)
    assert (limited.message_count, limited.next_begin_offset) == (1, 1)


async def test_concurrent_sends_share_record_batches(open_store: StoreFactory) -> None:
    store = await open_store()
    results = await asyncio.gather(*(store.put_messages("T", i % 4, [message(f"m{i}".encode())]) for i in range(400)))
    assert store.appender.rounds < 100  # coalesced, not one stored batch per message
    for queue_id in range(4):
        offsets = sorted(r.first_queue_offset for r in results if r.queue_id == queue_id)
        assert offsets == list(range(100))
        assert len(await read_all(store, "T", queue_id)) == 100


async def test_tag_filter_and_byte_limit(open_store: StoreFactory) -> None:
    store = await open_store()
    await store.put_messages("T", 0, [message(b"x" * 100, tags="A" if i % 3 == 0 else "B") for i in range(30)])
    only_a = await store.get_messages(
        "T", 0, 0, max_messages=ALL, max_bytes=BIG, tag_codes_filter=frozenset({java_string_hash("A")})
    )
    assert only_a.message_count == 10
    assert all(t == "A" for b in only_a.batches() for t in b.column("tags").to_pylist())
    none = await store.get_messages(
        "T", 0, 0, max_messages=ALL, max_bytes=BIG, tag_codes_filter=frozenset({java_string_hash("C")})
    )
    assert none.status is GetStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 30
    capped = await store.get_messages("T", 0, 0, max_messages=ALL, max_bytes=250)
    assert capped.message_count == 2 and capped.next_begin_offset == 2


async def test_arrow_batches_are_stored_per_batch(open_store: StoreFactory) -> None:
    store = await open_store()
    bodies = [f"body-{i}".encode() for i in range(1000)]
    batch = producer_batch(pa.table({"body": bodies, "tags": [f"T{i % 2}" for i in range(1000)]}))
    result = await store.put_arrow("A", 2, batch, born_timestamp=123, born_host="10.0.0.1:1")
    assert (result.first_queue_offset, result.count) == (0, 1000)
    table = await read_all(store, "A", 2)
    assert table.column("body").to_pylist() == bodies
    assert table.column("tags").to_pylist()[:2] == ["T0", "T1"]
    assert store.appender.rounds == 1


def mapped_from(batch: pa.RecordBatch, path: Path) -> bool:
    """Whether the batch's bodies lie in a mapping of the file at `path` (this process's maps)."""
    address = batch.column("body").buffers()[2].address
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, *_, name = line.split(maxsplit=5)
        low, high = (int(part, 16) for part in span.split("-"))
        if name == str(path) and low <= address < high:
            return True
    return False


async def test_large_arrow_batches_read_from_disk_are_mapped_and_whole(open_store: StoreFactory) -> None:
    """Arrow batches of MAP_FROM_BYTES or more are read from a mapping of their segment, smaller
    ones with a pread: both read back as stored, with and without the batch cache."""
    store = await open_store(batch_cache_bytes=1)  # every read goes to disk
    big = [os.urandom(200) + f"big-{i}".encode() for i in range(MAP_FROM_BYTES // 200 + 10)]
    small = [f"small-{i}".encode() for i in range(100)]
    for bodies in (big, small, big):
        await store.put_arrow(
            "M", 0, producer_batch(pa.table({"body": bodies})), born_timestamp=1, born_host="10.0.0.1:1"
        )
    entries = await store._entries(store.queues[("M", 0)], 0, 3 * len(big))
    positions = sorted(set(entries["batch_pos"].tolist()))
    read = [store.commit_log.segment_holding(p).read(p) for p in positions]
    assert [mapped_from(batch, store.commit_log.segment_holding(positions[0]).path) for batch in read] == [
        True,
        False,
        True,
    ]
    assert [b.num_rows for b in read] == [len(big), len(small), len(big)]
    assert (await read_all(store, "M", 0)).column("body").to_pylist() == big + small + big


async def test_restart_keeps_offsets_and_continues(open_store: StoreFactory) -> None:
    store = await open_store(mapped_file_size_commit_log=4096)
    for i in range(50):
        await store.put_messages("T", i % 2, [message(b"m%03d" % i, keys=f"key{i}")])
    await store.stop()
    assert len(list(store.config.commit_log_dir.iterdir())) > 1  # rolled over small segments
    reopened = await open_store(mapped_file_size_commit_log=4096)
    assert reopened.max_offset("T", 0) == 25
    result = await reopened.put_messages("T", 0, [message(b"after")])
    assert result.first_queue_offset == 25
    bodies = (await read_all(reopened, "T", 0)).column("body").to_pylist()
    assert bodies == [b"m%03d" % i for i in range(0, 50, 2)] + [b"after"]


async def test_segments_are_named_by_start_offset(open_store: StoreFactory) -> None:
    store = await open_store(mapped_file_size_commit_log=2048)
    for _ in range(20):
        await store.put_messages("T", 0, [message(b"x" * 200)])
    names = sorted(p.name for p in store.config.commit_log_dir.iterdir())
    assert names[0] == segment_name(0)
    assert [int(n) for n in names] == [s.start for s in store.commit_log.segments]


async def test_torn_tail_is_truncated(open_store: StoreFactory) -> None:
    store = await open_store()
    await store.put_messages("T", 0, [message(b"kept")])
    await store.stop()
    segment = sorted(store.config.commit_log_dir.iterdir())[-1]
    intact = segment.stat().st_size
    with segment.open("ab") as f:
        f.write(b"RSB1" + b"\x00\x00\x01\x00" + b"torn record")
    store.config.checkpoint_path.unlink()  # as if the crash came before any checkpoint
    reopened = await open_store()
    assert segment.stat().st_size == intact
    assert (await read_all(reopened, "T", 0)).column("body").to_pylist() == [b"kept"]
    await reopened.put_messages("T", 0, [message(b"next")])
    assert (await read_all(reopened, "T", 0)).column("body").to_pylist() == [b"kept", b"next"]


async def test_corrupt_record_checksum_is_detected(open_store: StoreFactory) -> None:
    store = await open_store()
    await store.put_messages("T", 0, [message(b"first")])
    await store.put_messages("T", 0, [message(b"second")])
    await store.stop()
    segment = sorted(store.config.commit_log_dir.iterdir())[-1]
    data = bytearray(segment.read_bytes())
    data[-10] ^= 0xFF  # flip a byte inside the last record's payload
    segment.write_bytes(bytes(data))
    store.config.checkpoint_path.unlink()
    reopened = await open_store()
    assert (await read_all(reopened, "T", 0)).column("body").to_pylist() == [b"first"]


async def test_consume_queues_rebuilt_when_they_disagree(open_store: StoreFactory) -> None:
    store = await open_store()
    for i in range(10):
        await store.put_messages("T", 0, [message(f"m{i}".encode())])
    await store.stop()
    queue_file = next((store.config.consume_queue_dir / "T" / "0").iterdir())
    queue_file.write_bytes(queue_file.read_bytes()[: 32 * 4])  # lose entries the checkpoint vouched for
    reopened = await open_store()
    assert reopened.max_offset("T", 0) == 10
    assert (await read_all(reopened, "T", 0)).column("body").to_pylist() == [b"m%d" % i for i in range(10)]


async def test_a_log_of_both_record_kinds_reads_the_same_after_a_rebuild(open_store: StoreFactory) -> None:
    """Standard sends are stored as message records, Arrow sends as Arrow batches: a standard and an
    Arrow read of the queue, and lookups by key and offset, give the same messages before and after
    the consume queues are rebuilt from the log."""
    store = await open_store()
    await store.put_messages("T", 0, [message(b"s0", keys="k0", uniq="U0"), message(b"s1", tags="A")])
    batch = producer_batch(pa.table({"body": [b"a0", b"a1", b"a2"], "keys": ["k1", None, None]}))
    await store.put_arrow("T", 0, batch, born_timestamp=123, born_host="10.0.0.1:1")
    await store.put_messages("T", 0, [message(b"s2", tags="A")])

    async def observed(opened: MessageStore) -> tuple[list[object], bytes, list[object]]:
        result = await opened.get_messages("T", 0, 0, max_messages=100, max_bytes=BIG)
        rows = pa.Table.from_batches(result.batches()).drop_columns(["sys_flag"]).to_pylist()
        keyed = await opened.query_by_key("T", "k1", 10, 0, 2**62, unique_key=False)
        by_offset = [await opened.message_at(r["commit_log_offset"]) for r in rows]
        assert [{k: v for k, v in (m or {}).items() if k != "sys_flag"} for m in by_offset] == rows
        return rows, result.records(STORE_HOST), [keyed[0], *by_offset]

    before = await observed(store)
    assert [r["body"] for r in before[0]] == [b"s0", b"s1", b"a0", b"a1", b"a2", b"s2"]  # type: ignore[index]
    assert [m.body for m in decode_records(before[1])] == [b"s0", b"s1", b"a0", b"a1", b"a2", b"s2"]
    await store.stop()
    for path in (store.config.consume_queue_dir / "T" / "0").iterdir():
        path.unlink()
    store.config.checkpoint_path.unlink()  # dispatch everything again from the log
    reopened = await open_store()
    assert await observed(reopened) == before
    tagged = await reopened.get_messages("T", 0, 0, max_messages=100, max_bytes=BIG, tag_codes_filter=frozenset({65}))
    assert [m.body for m in decode_records(tagged.records(STORE_HOST))] == [b"s1", b"s2"]


async def test_missing_consume_queue_files_are_rebuilt(open_store: StoreFactory) -> None:
    store = await open_store()
    await store.put_messages("T", 3, [message(b"a"), message(b"b")])
    await store.stop()
    for path in (store.config.consume_queue_dir / "T" / "3").iterdir():
        path.unlink()
    reopened = await open_store()
    assert reopened.max_offset("T", 3) == 2


async def test_sync_flush_fsyncs_once_per_round(open_store: StoreFactory) -> None:
    store = await open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    await asyncio.gather(*(store.put_messages("T", 0, [message(b"s%d" % i)]) for i in range(200)))
    assert store.appender.fsyncs == store.appender.rounds
    assert store.appender.rounds < 200


async def test_retention_deletes_old_segments_and_moves_min_offset(open_store: StoreFactory) -> None:
    store = await open_store(mapped_file_size_commit_log=2048, file_reserved_time=0.5 / 3600, delete_when="*")
    for i in range(20):
        await store.put_messages("T", 0, [message(b"old%02d" % i + b"x" * 200)])
    old_segments = len(store.commit_log.segments)
    assert old_segments > 2
    past = time.time() - 10
    for segment in store.commit_log.segments:
        os.utime(segment.path, (past, past))
    await store.put_messages("T", 0, [message(b"new")])  # keeps the current segment fresh
    await store.retention.delete_expired()
    assert len(store.commit_log.segments) < old_segments
    low = store.min_offset("T", 0)
    assert low > 0
    moved = await store.get_messages("T", 0, 0, max_messages=32, max_bytes=BIG)
    assert (moved.status, moved.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, low)
    assert (await read_all(store, "T", 0, low)).column("body").to_pylist()[-1] == b"new"


async def test_search_by_time_and_earliest_store_time(open_store: StoreFactory) -> None:
    store = await open_store()
    await store.put_messages("T", 0, [message(b"a")])
    await asyncio.sleep(0.02)
    middle = int(time.time() * 1000)
    await asyncio.sleep(0.02)
    await store.put_messages("T", 0, [message(b"b")])
    assert await store.offset_for_timestamp("T", 0, 0) == 0
    assert await store.offset_for_timestamp("T", 0, middle) == 1
    assert await store.offset_for_timestamp("T", 0, middle + 10_000) == 2
    earliest = await store.earliest_store_time("T", 0)
    assert 0 < earliest < middle


async def test_lookup_by_key_and_by_offset(open_store: StoreFactory) -> None:
    store = await open_store()
    await store.put_messages("T", 0, [message(b"one", keys="order-1 customer-9", uniq="UNIQ1")])
    await store.put_messages("U", 0, [message(b"other topic", keys="order-1")])
    found = await store.query_by_key("T", "order-1", 10, 0, 2**62, unique_key=False)
    assert [m["body"] for m in found] == [b"one"]
    by_uniq = await store.query_by_key("T", "UNIQ1", 10, 0, 2**62, unique_key=True)
    assert len(by_uniq) == 1
    offset = found[0]["commit_log_offset"]
    _, decoded = decode_offset_msg_id(offset_msg_id(STORE_HOST, offset))
    assert (await store.message_at(decoded) or {}).get("body") == b"one"
    assert await store.message_at(10**12) is None


async def test_delete_topic_forgets_its_queues(open_store: StoreFactory, tmp_path: Path) -> None:
    store = await open_store()
    await store.put_messages("Gone", 0, [message(b"x")])
    await store.flush_logics()
    await store.delete_topic("Gone")
    assert store.max_offset("Gone", 0) == 0
    assert not (store.config.consume_queue_dir / "Gone").exists()


def test_tag_codes_match_java() -> None:
    assert java_string_hash("TagA") == 2598919
    assert np.int64(java_string_hash("Hello World")) == -862545276


@pytest.mark.parametrize("flush", list(FlushDiskType))
async def test_stop_flushes_everything(open_store: StoreFactory, flush: FlushDiskType) -> None:
    store = await open_store(flush_disk_type=flush)
    await asyncio.gather(*(store.put_messages("T", 0, [message(b"%d" % i)]) for i in range(50)))
    await store.stop()
    assert not store.config.abort_path.exists()
    reopened = await open_store(flush_disk_type=flush)
    assert reopened.max_offset("T", 0) == 50


async def test_arrow_reads_of_rounds_shared_by_queues(open_store: StoreFactory) -> None:
    """Standard sends to three queues share stored rounds; an Arrow read of each queue takes every
    third record of many rounds (and of one round, from a later offset), as the standard read does."""
    store = await open_store()
    bodies = [f"m{i}".encode() * (i % 7 + 1) for i in range(300)]
    for wave in range(0, 300, 30):  # a few rounds of sends to every queue
        sends = [store.put_messages("T", i % 3, [message(bodies[i], uniq=f"U{i}")]) for i in range(wave, wave + 30)]
        await asyncio.gather(*sends)
    assert 3 < store.appender.rounds < 100
    for queue_id in range(3):
        for offset in (0, 97):
            result = await store.get_messages("T", queue_id, offset, max_messages=ALL, max_bytes=BIG)
            assert len(result.pieces) > (1 if offset == 0 else 0)
            arrow = pa.Table.from_batches(result.batches())
            standard = decode_records(result.records(STORE_HOST))
            assert arrow.column("body").to_pylist() == [m.body for m in standard]
            assert arrow.column("msg_id").to_pylist() == [m.msg_id for m in standard]
            assert arrow.column("queue_offset").to_pylist() == list(range(offset, 100))
            assert arrow.column("body").to_pylist() == bodies[3 * offset + queue_id :: 3]
