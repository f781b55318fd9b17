"""Transactions on a `flavor=apache` broker, as Apache RocketMQ 4.9 runs them: every END stores a final
message, an open half message is checked through a copy written back to the half queue, every round
counts on the copy until `transactionCheckMax`, and CHECK_IMMUNITY_TIME_IN_SECONDS holds the checks off."""

from __future__ import annotations

import asyncio
import time

import pytest

from rocketspark.client.api.offset import get_max_offset
from rocketspark.client.producer.transaction import AsyncTransactionProducer, TransactionStatus
from rocketspark.message.message import Message, MessageExt
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TRANS_CHECK_MAX_TIME_TOPIC
from rocketspark.remoting.client import RemotingClient
from tests.integration.broker_client import pull_all
from tests.transaction.conftest import Cluster, RecordingListener
from tests.transaction.test_transactions import topic_of_one_queue, visible
from tests.waiting import eventually


@pytest.fixture
def client(remoting_client: RemotingClient) -> RemotingClient:
    return remoting_client


def producer(cluster: Cluster, group: str, listener: RecordingListener) -> AsyncTransactionProducer:
    return AsyncTransactionProducer(group, listener, client_config=cluster.client_config())


def checks_of(listener: RecordingListener, msg_id: str) -> list[MessageExt]:
    return [m for m in listener.checked if m.msg_id == msg_id]


async def test_every_end_stores_a_final_message(apache: Cluster, client: RemotingClient) -> None:
    await topic_of_one_queue(client, apache, "ApTwice")
    async with producer(apache, "ap_twice", RecordingListener(TransactionStatus.UNKNOWN)) as tx:
        _, half = await tx.send_half(Message("ApTwice", b"row"))
        await tx.end_transaction(half, TransactionStatus.COMMIT, wait=True)
        await tx.end_transaction(half, TransactionStatus.COMMIT, wait=True)
        await tx.end_transaction(half, TransactionStatus.ROLLBACK, wait=True)  # no conflict on Apache
    stored = await pull_all(client, apache.broker.address, "ApTwice", 0)
    assert [(m.body, m.msg_id) for m in stored] == [(b"row", half.msg_id)] * 2


async def test_an_open_half_message_is_checked_through_copies_then_discarded(
    apache: Cluster, client: RemotingClient
) -> None:
    await topic_of_one_queue(client, apache, "ApCopies")
    listener = RecordingListener(TransactionStatus.UNKNOWN)
    async with producer(apache, "ap_copies", listener) as tx:
        moved_before = await get_max_offset(client, apache.broker.address, TRANS_CHECK_MAX_TIME_TOPIC, 0)
        born = time.time()
        _, half = await tx.send_half(Message("ApCopies", b"open"))

        async def moved() -> bool:
            return await get_max_offset(client, apache.broker.address, TRANS_CHECK_MAX_TIME_TOPIC, 0) > moved_before

        await eventually(moved, timeout_s=20, what="the move to TRANS_CHECK_MAX_TIME_TOPIC")
        checks = checks_of(listener, half.msg_id)
        assert [m.properties[props.TRANSACTION_CHECK_TIMES] for m in checks] == ["1", "2", "3", "4", "5"]
        # each check names a new copy of the half message, never the one the producer holds
        offsets = [m.queue_offset for m in checks]
        assert offsets == sorted(set(offsets)) and offsets[0] > half.queue_offset
        assert time.time() - born >= 1.0  # not before transactionTimeOut
        # the discarded half message is still there: the producer's END commits it
        await tx.end_transaction(half, TransactionStatus.COMMIT, wait=True)
    assert await visible(client, apache, "ApCopies") == [b"open"]


async def test_a_check_of_a_copy_and_the_producer_both_commit(apache: Cluster, client: RemotingClient) -> None:
    """Apache's duplicate (issue "Transactions 2"): the check of a copy answered COMMIT and the
    producer's END of the first half message both store the row."""
    await topic_of_one_queue(client, apache, "ApBoth")
    listener = RecordingListener(TransactionStatus.UNKNOWN, check=lambda _: TransactionStatus.COMMIT)
    async with producer(apache, "ap_both", listener) as tx:
        _, half = await tx.send_half(Message("ApBoth", b"row"))
        await eventually(lambda: checks_of(listener, half.msg_id), timeout_s=15, what="the check of a copy")
        await eventually(lambda: visible(client, apache, "ApBoth"), timeout_s=15, what="the checked commit")
        await tx.end_transaction(half, TransactionStatus.COMMIT, wait=True)
    assert await visible(client, apache, "ApBoth") == [b"row", b"row"]


async def test_check_immunity_holds_the_checks_off_but_every_round_counts(
    apache: Cluster, client: RemotingClient
) -> None:
    await topic_of_one_queue(client, apache, "ApImmune")
    listener = RecordingListener(TransactionStatus.UNKNOWN)
    async with producer(apache, "ap_immune", listener) as tx:
        immune = Message("ApImmune", b"immune", properties={props.CHECK_IMMUNITY_TIME_IN_SECONDS: "2"})
        moved_before = await get_max_offset(client, apache.broker.address, TRANS_CHECK_MAX_TIME_TOPIC, 0)
        born = time.time()
        _, half = await tx.send_half(immune)
        await asyncio.sleep(1.5)
        assert checks_of(listener, half.msg_id) == []  # past transactionTimeOut, not past the immunity
        [check] = await eventually(lambda: checks_of(listener, half.msg_id), timeout_s=15, what="the first check")
        assert time.time() - born >= 2.0
        # the rounds during the immunity counted: copied back each time, naming the first half message
        assert int(check.properties[props.TRANSACTION_CHECK_TIMES]) >= 2
        assert check.properties[props.TRANSACTION_PREPARED_QUEUE_OFFSET] == str(half.queue_offset)

        async def moved() -> bool:
            return await get_max_offset(client, apache.broker.address, TRANS_CHECK_MAX_TIME_TOPIC, 0) > moved_before

        await eventually(moved, timeout_s=20, what="the discard after transactionCheckMax rounds")
    assert all(int(m.properties[props.TRANSACTION_CHECK_TIMES]) <= 5 for m in checks_of(listener, half.msg_id))
