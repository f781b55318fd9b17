"""The transaction service across a crash between a commit and its end record: at startup it finds
the commit in the commit log, records its end, and an END that arrives again stores nothing."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from broker.managers.producer_manager import ProducerManager
from broker.store.message_store import MessageStore
from broker.transaction.half import EndKind, committed_message, half_message
from broker.transaction.service import CheckSettings, TransactionService
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.message import sysflag
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketspark.protocol.headers.transaction import EndTransactionRequestHeader
from tests.store.conftest import StoreFactory, message

GROUP = "orders-tx"


def service(store: MessageStore, path: Path, io: ThreadPoolExecutor) -> TransactionService:
    settings = CheckSettings(timeout_ms=6_000, interval_ms=60_000, check_max=15)
    return TransactionService(store, ProducerManager(120_000), settings, AtomicFileWriter(path, io), lambda _: None)


async def store_half(store: MessageStore, number: int) -> dict[str, Any]:
    """Store half message `number` (body "order N", UNIQ_KEY "IDN") of GROUP; its stored row."""
    sent = message(f"order {number}".encode(), uniq=f"ID{number}").with_properties(
        {props.TRANSACTION_PREPARED: "true", props.PRODUCER_GROUP: GROUP}
    )
    half_topic, half_queue, half = half_message("Orders", 0, sent)
    await store.put_messages(half_topic, half_queue, [half])
    offset = store.max_offset(TRANS_HALF_TOPIC, 0) - 1
    result = await store.get_messages(TRANS_HALF_TOPIC, 0, offset, max_messages=1, max_bytes=1 << 20)
    return result.batches()[0].to_pylist()[0]


def end_header(row: dict[str, Any], kind: EndKind) -> EndTransactionRequestHeader:
    types = {EndKind.COMMIT: sysflag.TRANSACTION_COMMIT_TYPE, EndKind.ROLLBACK: sysflag.TRANSACTION_ROLLBACK_TYPE}
    return EndTransactionRequestHeader(
        producer_group=GROUP,
        tran_state_table_offset=row["queue_offset"],
        commit_log_offset=row["commit_log_offset"],
        commit_or_rollback=types[kind],
        msg_id=row["msg_id"],
    )


async def test_a_commit_stored_without_its_end_record_is_not_stored_again(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    store = await open_store(duplicate_window_seconds=0)
    progress = tmp_path / "transaction.json"
    with ThreadPoolExecutor(max_workers=1) as io:
        before = service(store, progress, io)
        await before.load()  # writes the progress: nothing committed before this commit log offset
        await before.stop()
        row = await store_half(store, 7)
        topic, queue_id, committed = committed_message(row)
        await store.put_messages(topic, queue_id, [committed])  # and the broker dies before the end record

        after = service(store, progress, io)
        await after.load()
        assert after.state.is_final(row["queue_offset"])
        assert store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 1  # the end record the crash left out
        # the producer's end, or a check's answer, after the restart
        await after.end(end_header(row, EndKind.COMMIT), EndKind.COMMIT)
        await after.stop()
    assert store.max_offset("Orders", 0) == 1


@pytest.mark.parametrize("progress_format", ["current", "without op offset"])
async def test_startup_reads_back_only_the_end_records_the_progress_does_not_count(
    open_store: StoreFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture, progress_format: str
) -> None:
    """Start-up does not grow with the op queue: the progress counts the end records before its
    `opOffset`, and says how the half messages past its `halfOffset` ended. A progress file written
    before `opOffset` existed has every end record read back, as before."""
    store = await open_store(duplicate_window_seconds=0)
    progress = tmp_path / "transaction.json"
    with ThreadPoolExecutor(max_workers=1) as io:
        before = service(store, progress, io)
        await before.load()
        rows = [await store_half(store, number) for number in range(20)]
        for row in rows:  # all but the half message at offset 5 end: the later ones are past halfOffset
            if row["queue_offset"] != 5:
                kind = EndKind.COMMIT if row["queue_offset"] % 2 else EndKind.ROLLBACK
                await before.end(end_header(row, kind), kind)
        await before.stop()
        if progress_format == "without op offset":
            document = json.loads(progress.read_text())
            progress.write_text(
                json.dumps({k: v for k, v in document.items() if k not in ("opOffset", "ended", "endedRuns")})
            )

        after = service(store, progress, io)
        with caplog.at_level(logging.INFO, logger="broker.transaction.service"):
            await after.load()
        first = 19 if progress_format == "current" else 0
        assert f"transaction end records {first}..19 read back" in caplog.text
        assert [o for o in range(20) if not after.state.has_ended(o)] == [5]
        assert after.state.is_final(7) and after.state.is_final(8)
        await after.end(end_header(rows[7], EndKind.COMMIT), EndKind.COMMIT)  # again: stores nothing
        await after.stop()
    assert store.max_offset("Orders", 0) == 9  # the odd offsets but 5, committed once
    assert store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 19
