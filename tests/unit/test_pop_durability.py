"""The pop engine's state across restarts and crashes, in process, on a real store on tmp_path.

A clean restart and a crash (the engine's files as a kill -9 leaves them: no snapshot at the end,
the journal as written, possibly a torn last record, consumer offsets not saved since) both
keep what was acknowledged acknowledged and what was in flight in flight, with its receipt
handle still valid; the journal stays bounded by snapshots however many changes are made. The
real kill -9 of a broker process, with the 5.x client, is in tests/interop/.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from broker.pop import journal, records
from broker.pop.journal import PopJournal, read_records
from broker.pop.records import PopTables
from broker.pop.service import PopService
from tests.unit.pop_parts import Clock, bodies, receive, send, started
from tests.unit.processor_parts import GROUP, TOPIC, BrokerParts, open_parts


@asynccontextmanager
async def broker(root: Path) -> AsyncIterator[BrokerParts]:
    """The broker's parts on `root`, its consumer offsets loaded, as a broker starting there has them."""
    async with open_parts(root) as parts:
        parts.consumer_offsets.load()
        yield parts


async def crash(service: PopService) -> None:
    """Leave the engine's files as a kill -9 would: what was written, no closing snapshot."""
    for periodic in service._services:
        await periodic.stop()
    await service.core.journal.close()


@pytest.mark.parametrize("sync", [False, True], ids=["ASYNC_FLUSH", "SYNC_FLUSH"])
async def test_what_written_answers_is_in_the_journal_file(tmp_path: Path, sync: bool) -> None:
    pop = PopJournal(tmp_path, sync=sync, snapshot=PopTables().encode_snapshot)
    await pop.load()
    path = tmp_path / f"{journal.JOURNAL_PREFIX}{pop.number}"
    pop.append(records.base_record(GROUP, TOPIC, 0, 5))
    pop.append(records.finish_record(GROUP, TOPIC, 0, 5, 6))
    done = pop.written()
    assert done.done() is not sync  # ASYNC_FLUSH: written on the loop at once, no hop to the I/O thread
    await done
    assert list(read_records(path)) == [["b", GROUP, TOPIC, 0, 5], ["f", GROUP, TOPIC, 0, 5, 6]]
    pop.append(records.base_record(GROUP, TOPIC, 1, 7))  # nobody awaits it: written after this turn of the loop
    await asyncio.sleep(0)
    if sync:
        await pop.close()
    assert list(read_records(path))[-1] == ["b", GROUP, TOPIC, 1, 7]
    if not sync:
        await pop.close()


@pytest.mark.parametrize("ending", ["stop", "crash"])
async def test_acked_stays_acked_and_in_flight_stays_in_flight(tmp_path: Path, ending: str) -> None:
    clock = Clock()
    async with broker(tmp_path) as parts:
        pop = await started(parts, clock)
        for body in (b"a", b"b", b"c"):
            await send(parts, body)
        a, b, c = await receive(pop, invisible_ms=30_000)
        await pop.ack(GROUP, TOPIC, a.receipt_handle)
        if ending == "stop":
            await pop.stop()
            await parts.consumer_offsets.persist()
        else:
            await crash(pop)  # consumer offsets not saved since

    async with broker(tmp_path) as parts:
        pop = await started(parts, clock)
        assert parts.consumer_offsets.offsets(GROUP, TOPIC)[0] == 1
        assert await receive(pop) == []  # b and c are still invisible, a is acknowledged
        await pop.ack(GROUP, TOPIC, b.receipt_handle)  # handles given before the restart still name their messages
        clock.advance(30_000)
        [again] = await receive(pop)
        assert (again.row["body"], again.delivery_attempt) == (b"c", 2)
        assert int(again.receipt_handle.split()[3]) > int(c.receipt_handle.split()[3])  # a new delivery id
        await pop.ack(GROUP, TOPIC, again.receipt_handle)
        assert parts.consumer_offsets.offsets(GROUP, TOPIC)[0] == 3
        await pop.stop()


async def test_a_torn_last_record_is_left_out(tmp_path: Path) -> None:
    clock = Clock()
    async with broker(tmp_path) as parts:
        pop = await started(parts, clock)
        await send(parts, b"kept")
        [kept] = await receive(pop)
        await crash(pop)
    [open_journal] = sorted((tmp_path / "store" / "pop").glob("journal.*"))
    with open_journal.open("ab") as file:
        file.write(b'["f","in-process-consumers","InProcessTo')  # a write cut short

    async with broker(tmp_path) as parts:
        pop = await started(parts, clock)
        assert await receive(pop) == []
        await pop.ack(GROUP, TOPIC, kept.receipt_handle)
        await pop.stop()


async def test_the_journal_stays_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "ROTATE_BYTES", 2_000)
    clock = Clock()
    async with broker(tmp_path) as parts:
        pop = await started(parts, clock)
        for i in range(60):
            await send(parts, f"m{i}".encode())
            [received] = await receive(pop)
            await pop.ack(GROUP, TOPIC, received.receipt_handle)
        assert pop.core.journal.rotations >= 3
        files = sorted(p.name for p in (tmp_path / "store" / "pop").iterdir())
        assert len(files) == 2 and "snapshot" in files, files  # the snapshot and the open journal
        await crash(pop)

    async with broker(tmp_path) as parts:
        pop = await started(parts, clock)
        assert parts.consumer_offsets.offsets(GROUP, TOPIC)[0] == 60
        await send(parts, b"next")
        clock.advance(3_600_000)
        assert bodies(await receive(pop)) == [b"next"]
        await pop.stop()
