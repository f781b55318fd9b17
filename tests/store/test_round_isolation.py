"""A send whose round fails to build must fail alone: the store writes the others in new rounds.

The bad send comes through the store's own interface, without the processors' checks, so the
round really fails while being built.
"""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest

from broker.store.config import FlushDiskType
from rocketspark.errors import ValidationError
from rocketspark.message.batches.producer import producer_batch
from tests.store.conftest import StoreFactory, message
from tests.store.test_message_store import read_all

SENDERS = 60


async def test_a_round_that_fails_to_build_is_retried_without_the_bad_send(open_store: StoreFactory) -> None:
    store = await open_store()
    bad = producer_batch(pa.table({"body": [b"bad"], "keys": ["k" * 40_000]}))
    sends = [store.put_messages("T", 0, [message(b"innocent %d" % i)]) for i in range(SENDERS)]
    sends.insert(SENDERS // 2, store.put_arrow("T", 0, bad, born_timestamp=1, born_host="10.0.0.1:1"))
    results = await asyncio.gather(*sends, return_exceptions=True)
    bad_result = results.pop(SENDERS // 2)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert failures == []
    assert isinstance(bad_result, ValidationError) and "32,767" in str(bad_result)
    offsets = sorted(r.first_queue_offset for r in results if not isinstance(r, BaseException))
    assert offsets == list(range(SENDERS))
    table = await read_all(store, "T", 0)
    assert sorted(table.column("body").to_pylist()) == sorted(b"innocent %d" % i for i in range(SENDERS))
    assert table.column("queue_offset").to_pylist() == list(range(SENDERS))
    assert store.appender.rounds > 1  # the round was split


@pytest.mark.parametrize("flush", list(FlushDiskType))
async def test_the_store_keeps_writing_after_a_failed_round(open_store: StoreFactory, flush: FlushDiskType) -> None:
    store = await open_store(flush_disk_type=flush)
    bad = producer_batch(pa.table({"body": [b"bad"], "keys": ["k" * 40_000]}))
    with pytest.raises(ValidationError):
        await store.put_arrow("T", 0, bad, born_timestamp=1, born_host="10.0.0.1:1")
    result = await store.put_messages("T", 0, [message(b"after")])
    assert result.first_queue_offset == 0
    assert (await read_all(store, "T", 0)).column("body").to_pylist() == [b"after"]


async def test_a_duplicate_of_a_row_in_a_refused_send_is_stored_not_answered_from_nothing(
    open_store: StoreFactory,
) -> None:
    """One round: an Arrow send whose second row cannot be stored, then a standard send repeating its
    first row (same UNIQ_KEY, same body). The check takes the standard send for a duplicate of that
    row; the round fails, and the Arrow send is refused when it is split. The standard send must then
    be stored and answered with its own offsets, not with those of a row that was never written."""
    store = await open_store(duplicate_window_seconds=600)
    refused = producer_batch(
        pa.table({"body": [b"payload", b"bad"], "uniq_key": ["U-1", "U-2"], "keys": [None, "k" * 40_000]})
    )
    sends = [
        store.put_arrow("T", 0, refused, born_timestamp=1, born_host="10.0.0.1:1"),
        store.put_messages("T", 1, [message(b"payload", uniq="U-1")]),  # the same round: nothing awaited between
    ]
    refused_result, result = await asyncio.gather(*sends, return_exceptions=True)
    assert isinstance(refused_result, ValidationError)
    assert not isinstance(result, BaseException)
    assert result.duplicates == 0
    stored = await read_all(store, "T", 1)
    assert stored.column("body").to_pylist() == [b"payload"]
    assert stored.column("commit_log_offset").to_pylist() == list(result.commit_log_offsets)
    assert (result.queue_id, result.first_queue_offset) == (1, 0)
    assert (await read_all(store, "T", 0)).num_rows == 0
    # the stored row is now the first copy of its key: a resend is answered with it
    again = await store.put_messages("T", 0, [message(b"payload", uniq="U-1")])
    assert (again.duplicates, again.first_commit_log_offset) == (1, result.first_commit_log_offset)
