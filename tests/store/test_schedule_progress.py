"""The schedule service's delivery progress: offsets delivered out of order, its file, and the
deliveries it finds in a real store's commit log after a crash."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from broker.schedule.delay_levels import ORIGIN
from broker.schedule.progress import DeliveryProgress
from broker.store.writer.append_requests import StandardMessage
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.message.properties.codec import encode_properties
from rocketspark.message.validation import SCHEDULE_TOPIC
from tests.store.conftest import StoreFactory


def delivery(origin: str) -> StandardMessage:
    return StandardMessage(
        body=origin.encode(),
        properties=encode_properties({ORIGIN: origin, "UNIQ_KEY": origin}),
        uniq_key=origin,
        born_host="127.0.0.1:5555",
    )


async def test_out_of_order_deliveries_are_kept_until_the_gap_closes(tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=1) as io:
        writer = AtomicFileWriter(tmp_path / "delayOffset.json", io)
        progress = DeliveryProgress(writer)
        progress.delivered(1, [0, 1, 2])
        progress.delivered(1, [5, 6])  # a later run stored, the run of 3 and 4 refused
        assert progress.offset(1) == 3
        assert [progress.is_delivered(1, o) for o in range(8)] == [True] * 3 + [False] * 2 + [True] * 2 + [False]
        progress.persist(4096)
        await writer.flush()

        again = DeliveryProgress(AtomicFileWriter(tmp_path / "delayOffset.json", io))
        again.load()
        assert (again.levels, again.watermark) == ({1: 3}, 4096)
        assert again.is_delivered(1, 6) and not again.is_delivered(1, 4)
        again.delivered(1, [3, 4])
        assert again.offset(1) == 7
        again.skip_to(2, 10)
        assert again.levels == {1: 7, 2: 10}


async def test_recovery_counts_the_deliveries_stored_after_the_last_write(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    store = await open_store()
    await store.put_messages("Real", 0, [delivery("1:9")])  # counted by the write below already
    with ThreadPoolExecutor(max_workers=1) as io:
        writer = AtomicFileWriter(tmp_path / "delayOffset.json", io)
        progress = DeliveryProgress(writer)
        progress.delivered(1, range(3))
        progress.persist(store.commit_log.max_offset)
        await writer.flush()
        await store.put_messages("Real", 0, [delivery("1:4"), delivery("1:3")])
        await store.put_messages("Other", 1, [delivery("2:0")])
        await store.put_messages(SCHEDULE_TOPIC, 0, [delivery("1:5")])  # parked again: no delivery
        await store.put_messages("Real", 0, [delivery("1:7")])

        recovered = DeliveryProgress(AtomicFileWriter(tmp_path / "delayOffset.json", io))
        recovered.load()
        recovered.recover(store.commit_log)
    assert recovered.levels == {1: 5, 2: 1}
    assert [recovered.is_delivered(1, o) for o in (5, 6, 7, 8, 9)] == [False, False, True, False, False]
