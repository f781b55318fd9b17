"""The transaction service across a crash between a commit and its end record: at startup it finds
the commit in the commit log, records its end, and an END that arrives again stores nothing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from broker.producer_manager import ProducerManager
from broker.store.message_store import MessageStore
from broker.transaction.half import EndKind, committed_message, half_message
from broker.transaction.service import CheckSettings, TransactionService
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.message import sysflag
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketspark.remoting.headers.transaction import EndTransactionRequestHeader
from tests.store.conftest import StoreFactory, message

GROUP = "orders-tx"


def service(store: MessageStore, path: Path, io: ThreadPoolExecutor) -> TransactionService:
    settings = CheckSettings(timeout_ms=6_000, interval_ms=60_000, check_max=15)
    return TransactionService(store, ProducerManager(120_000), settings, AtomicFileWriter(path, io), lambda _: None)


async def test_a_commit_stored_without_its_end_record_is_not_stored_again(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    store = await open_store(duplicate_window_seconds=0)
    progress = tmp_path / "transaction.json"
    with ThreadPoolExecutor(max_workers=1) as io:
        before = service(store, progress, io)
        await before.load()  # writes the progress: nothing committed before this commit log offset
        await before.stop()
        sent = message(b"order 7", uniq="ID7").with_properties(
            {props.TRANSACTION_PREPARED: "true", props.PRODUCER_GROUP: GROUP}
        )
        half_topic, half_queue, half = half_message("Orders", 0, sent)
        await store.put_messages(half_topic, half_queue, [half])
        result = await store.get_messages(TRANS_HALF_TOPIC, 0, 0, max_messages=1, max_bytes=1 << 20)
        row = result.batches()[0].to_pylist()[0]
        topic, queue_id, committed = committed_message(row)
        await store.put_messages(topic, queue_id, [committed])  # and the broker dies before the end record

        after = service(store, progress, io)
        await after.load()
        assert after.state.is_final(row["queue_offset"])
        assert store.max_offset(TRANS_OP_HALF_TOPIC, 0) == 1  # the end record the crash left out
        header = EndTransactionRequestHeader(
            producer_group=GROUP,
            tran_state_table_offset=row["queue_offset"],
            commit_log_offset=row["commit_log_offset"],
            commit_or_rollback=sysflag.TRANSACTION_COMMIT_TYPE,
            msg_id="ID7",
        )
        await after.end(header, EndKind.COMMIT)  # the producer's end, or a check's answer, after the restart
        await after.stop()
    assert store.max_offset("Orders", 0) == 1
