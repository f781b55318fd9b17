"""The timer service on a real store: timer messages parked by the send path's parking rule are
stored in their real queues at their time, in due order, once, across restarts, rolls and a
crash between a delivery and the progress write."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from broker.preload import preload
from broker.schedule.delay_levels import DelayLevels
from broker.schedule.parking import Parking
from broker.schedule.timer_index import TimerIndex
from broker.schedule.timer_service import TimerMessageService
from broker.store.message_store import MessageStore
from broker.store.results import GetStatus
from rocketspark.errors import ValidationError
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TIMER_TOPIC
from tests.store.conftest import StoreFactory, message
from tests.waiting import eventually

PARKING = Parking(DelayLevels((1000,)), timer_max_delay_s=3600)


def now_ms() -> int:
    return int(time.time() * 1000)


async def park(store: MessageStore, topic: str, queue_id: int, body: bytes, **timer: str) -> None:
    sent = message(body, uniq=body.decode())
    properties = {**props.decode_properties(sent.properties), **timer}
    sent = sent.with_properties(timer)
    placed = PARKING.destination(topic, queue_id, sent, properties)
    await store.put_messages(placed.topic, placed.queue_id, [placed.message])


async def stored(store: MessageStore, topic: str, queue_id: int = 0) -> list[dict[str, Any]]:
    result = await store.get_messages(topic, queue_id, 0, max_messages=10_000, max_bytes=1 << 30)
    if result.status is not GetStatus.FOUND:
        return []
    return [row for batch in result.batches() for row in batch.to_pylist()]


@pytest.fixture
async def timers(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Timer services on stores (started), stopped at teardown."""
    preload()  # as the broker does before it serves: else the first delivery waits for pyarrow's imports
    io = ThreadPoolExecutor(max_workers=1)
    running: list[TimerMessageService] = []

    async def start(store: MessageStore, roll_after_ms: int = 3_600_000) -> TimerMessageService:
        service = TimerMessageService(
            store, AtomicFileWriter(tmp_path / "timerProgress.json", io), roll_after_ms=roll_after_ms
        )
        await service.load()
        service.start()
        running.append(service)
        return service

    yield start
    for service in running:
        await service.stop()
    io.shutdown(wait=True)


def test_the_index_gives_entries_in_due_then_parked_order() -> None:
    index = TimerIndex()
    index.add(5_000, 3)
    index.add(1_200, 7)
    index.add(5_000, 1)
    index.add(900, 9)
    index.add_many(np.array([2_500, 1_200, 70_000]), np.array([11, 4, 12]))
    assert len(index) == 7 and index.next_due() == 900
    assert index.pop_due(1_200, 10) == [(900, 9), (1_200, 4), (1_200, 7)]
    index.add(1_100, 20)  # due already: comes out next
    assert index.pop_due(5_000, 2) == [(1_100, 20), (2_500, 11)]
    assert index.pop_due(5_000, 10) == [(5_000, 1), (5_000, 3)]
    assert index.next_due() == 70_000 and len(index) == 1


def test_the_parking_rule_reads_apache_properties_in_apaches_order() -> None:
    base = message(b"x")
    at = now_ms() + 60_000
    for timer, due in (
        ({props.TIMER_DELIVER_MS: str(at)}, at),
        ({props.TIMER_DELAY_SEC: "60", props.TIMER_DELIVER_MS: "1"}, None),  # seconds win
        ({props.TIMER_DELAY_MS: "60000"}, None),
    ):
        placed = PARKING.destination("T", 2, base.with_properties(timer), timer)
        assert (placed.topic, placed.queue_id, placed.parked) == (TIMER_TOPIC, 0, True)
        parked = props.decode_properties(placed.message.properties)
        assert parked[props.REAL_TOPIC] == "T" and parked[props.REAL_QUEUE_ID] == "2"
        assert abs(int(parked[props.TIMER_OUT_MS]) - (due or now_ms() + 60_000)) < 1000
    past = {props.TIMER_DELIVER_MS: str(now_ms() - 5)}
    assert PARKING.destination("T", 2, base.with_properties(past), past).topic == "T"  # due: stored at once
    delayed = {props.DELAY_TIME_LEVEL: "1", props.TIMER_DELAY_SEC: "60"}  # a delay level wins
    placed = PARKING.destination("T", 2, base.with_properties(delayed), delayed)
    assert placed.topic == "SCHEDULE_TOPIC_XXXX" and props.TIMER_DELAY_SEC not in placed.message.properties
    again = {props.TIMER_DELAY_SEC: "60", props.TIMER_OUT_MS: "1"}  # a delivered timer message sent on
    assert PARKING.destination("T", 2, base.with_properties(again), again).topic == "T"
    with pytest.raises(ValidationError, match="timerMaxDelaySec"):
        PARKING.check({props.TIMER_DELAY_SEC: "3601"})
    with pytest.raises(ValidationError, match="TIMER_DELIVER_MS property must be an epoch time"):
        PARKING.check({props.TIMER_DELIVER_MS: "tomorrow"})
    apache = Parking(DelayLevels((1000,)), timer_max_delay_s=None)
    far = {props.TIMER_DELAY_SEC: "999999999"}
    apache.check(far)  # Apache 4.9 knows no timer messages: kept as user properties
    assert apache.destination("T", 2, base.with_properties(far), far).topic == "T"


async def test_timer_messages_come_at_their_time_in_due_order(open_store: StoreFactory, timers) -> None:
    store = await open_store(duplicate_window_seconds=0)
    await timers(store)
    start = now_ms()
    offsets_ms = [700, 300, 500, 300, 100]
    for i, delay in enumerate(offsets_ms):
        await park(store, "Real", 1, f"m{i}".encode(), TIMER_DELIVER_MS=str(start + delay))
    assert await stored(store, "Real", 1) == []
    rows = await eventually(lambda: _at_least(store, "Real", 1, 5), timeout_s=5, interval_s=0.01, what="deliveries")
    assert [r["body"] for r in rows] == [b"m4", b"m1", b"m3", b"m2", b"m0"]
    for row in rows:
        properties = props.decode_properties(row["properties"])
        due = int(properties[props.TIMER_OUT_MS])
        assert 0 <= row["store_timestamp"] - due < 100, "stored within 100 ms of its time"
        assert props.REAL_TOPIC not in properties and properties[props.SCHEDULE_ORIGIN].startswith("timer:")


async def _at_least(store: MessageStore, topic: str, queue_id: int, count: int) -> list[dict[str, Any]] | None:
    rows = await stored(store, topic, queue_id)
    return rows if len(rows) >= count else None


async def test_a_restart_delivers_what_is_left_once(open_store: StoreFactory, timers, tmp_path: Path) -> None:
    store = await open_store(duplicate_window_seconds=0)
    service = await timers(store)
    start = now_ms()
    for i in range(40):
        await park(store, "Real", 0, b"r%02d" % i, TIMER_DELIVER_MS=str(start + 300 + (i % 2) * 1500))
    await eventually(lambda: _at_least(store, "Real", 0, 20), timeout_s=5, interval_s=0.01, what="the first half")
    await service.stop()
    assert len(await stored(store, "Real", 0)) == 20
    await store.stop()

    store = await open_store(duplicate_window_seconds=0)
    await timers(store)
    rows = await eventually(lambda: _at_least(store, "Real", 0, 40), timeout_s=5, interval_s=0.01, what="the rest")
    await asyncio.sleep(0.3)
    rows = await stored(store, "Real", 0)
    assert sorted(r["body"] for r in rows) == [b"r%02d" % i for i in range(40)]


async def test_deliveries_after_the_last_progress_write_are_not_repeated(
    open_store: StoreFactory, timers, tmp_path: Path
) -> None:
    """A crash after deliveries were stored but before the progress counting them was written."""
    store = await open_store(duplicate_window_seconds=0)
    service = await timers(store)
    progress_file = tmp_path / "timerProgress.json"
    start = now_ms()
    for i in range(30):
        await park(store, "Real", 0, b"c%02d" % i, TIMER_DELIVER_MS=str(start + 400 + i * 10))
    await service._writer.flush()
    before = progress_file.read_bytes()  # written when nothing was delivered yet
    await eventually(lambda: _at_least(store, "Real", 0, 30), timeout_s=5, interval_s=0.01, what="deliveries")
    await service.stop()
    progress_file.write_bytes(before)  # as if the broker died before writing it again

    await timers(store)
    await asyncio.sleep(0.5)
    assert len(await stored(store, "Real", 0)) == 30


async def test_long_waits_are_parked_again_and_delivered_once(open_store: StoreFactory, timers) -> None:
    store = await open_store(duplicate_window_seconds=0)
    service = await timers(store, roll_after_ms=300)
    due = now_ms() + 2_500
    for i in range(5):
        await park(store, "Real", 3, b"l%d" % i, TIMER_DELIVER_MS=str(due))
    await eventually(lambda: _at_least(store, TIMER_TOPIC, 0, 10), timeout_s=5, what="a roll")
    await service.stop()  # a restart between rolls

    await timers(store, roll_after_ms=300)
    rows = await eventually(lambda: _at_least(store, "Real", 3, 5), timeout_s=6, interval_s=0.01, what="deliveries")
    await asyncio.sleep(0.3)
    rows = await stored(store, "Real", 3)
    assert sorted(r["body"] for r in rows) == [b"l%d" % i for i in range(5)]
    assert all(0 <= r["store_timestamp"] - due < 100 for r in rows)
    parked = await stored(store, TIMER_TOPIC, 0)
    rolls = [int(props.decode_properties(r["properties"]).get(props.TIMER_ROLL_TIMES, "0")) for r in parked]
    assert max(rolls) >= 2
