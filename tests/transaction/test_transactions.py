"""Transactional messages through the real producer and broker: commit, rollback, the check, the
move to TRANS_CHECK_MAX_TIME_TOPIC, each half message committed once however often it is ended, and an
end that contradicts the first refused."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rocketspark.client.api import admin
from rocketspark.client.api.offset import get_max_offset
from rocketspark.client.producer.send_retry import SendError
from rocketspark.client.producer.transaction import AsyncTransactionProducer, TransactionStatus
from rocketspark.message.message import Message
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketspark.processes import wait_registered
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.integration.broker_client import pull_all
from tests.transaction.conftest import Cluster, RecordingListener
from tests.waiting import eventually


@pytest.fixture
def client(remoting_client: RemotingClient) -> RemotingClient:
    return remoting_client


async def topic_of_one_queue(client: RemotingClient, cluster: Cluster, topic: str) -> None:
    """Created and routed (a producer asking before would get TBW102's queues)."""
    await admin.create_topic(client, cluster.broker.address, TopicConfig(topic, 1, 1))
    await asyncio.to_thread(wait_registered, cluster.namesrv.address, cluster.broker.address, (topic,))


async def visible(client: RemotingClient, cluster: Cluster, topic: str) -> list[bytes]:
    """What a consumer of `topic` finds in it."""
    return [m.body for m in await pull_all(client, cluster.broker.address, topic, 0)]


async def ends_stored(client: RemotingClient, cluster: Cluster) -> int:
    return await get_max_offset(client, cluster.broker.address, TRANS_OP_HALF_TOPIC, 0)


def producer(cluster: Cluster, group: str, listener: RecordingListener) -> AsyncTransactionProducer:
    return AsyncTransactionProducer(group, listener, client_config=cluster.client_config())


async def test_commit_shows_the_message_only_after_the_local_transaction(cluster: Cluster, client) -> None:
    await topic_of_one_queue(client, cluster, "TxCommit")
    listener = RecordingListener(TransactionStatus.COMMIT, release=threading.Event())
    async with producer(cluster, "tx_commit", listener) as tx:
        sending = asyncio.ensure_future(tx.send_message_in_transaction(Message("TxCommit", b"order-1"), arg=7))
        await asyncio.to_thread(listener.started.wait, 10)
        assert await visible(client, cluster, "TxCommit") == []  # the half message is stored, not visible
        assert await get_max_offset(client, cluster.broker.address, TRANS_HALF_TOPIC, 0) >= 1
        listener.release.set()  # type: ignore[union-attr]
        result = await sending
        assert result.status is TransactionStatus.COMMIT
        assert listener.executed[0][1] == 7
        assert all(name.startswith("transaction-check-tx_commit") for name in listener.threads)
        stored = await eventually(lambda: pull_all(client, cluster.broker.address, "TxCommit", 0), what="the commit")
    assert [m.body for m in stored] == [b"order-1"]
    assert stored[0].msg_id == result.half.msg_id  # the committed message keeps the half message's UNIQ_KEY
    assert props.REAL_TOPIC not in stored[0].properties and props.TRANSACTION_PREPARED not in stored[0].properties


async def test_rollback_discards_the_message(cluster: Cluster, client) -> None:
    await topic_of_one_queue(client, cluster, "TxRollback")
    listener = RecordingListener(TransactionStatus.ROLLBACK)
    async with producer(cluster, "tx_rollback", listener) as tx:
        before = await ends_stored(client, cluster)
        result = await tx.send_message_in_transaction(Message("TxRollback", b"cancelled"))
        assert result.status is TransactionStatus.ROLLBACK
        await eventually(lambda: _more(client, cluster, before), what="the rollback's end record")
    # a commit is stored before its end record: none came
    assert await visible(client, cluster, "TxRollback") == []


async def _more(client: RemotingClient, cluster: Cluster, before: int) -> bool:
    return await ends_stored(client, cluster) > before


async def test_unknown_then_the_check_commits(cluster: Cluster, client) -> None:
    await topic_of_one_queue(client, cluster, "TxCheckCommit")
    listener = RecordingListener(TransactionStatus.UNKNOWN, check=lambda _: TransactionStatus.COMMIT)
    async with producer(cluster, "tx_check_commit", listener) as tx:
        result = await tx.send_message_in_transaction(Message("TxCheckCommit", b"late", tags="t"))
        assert result.status is TransactionStatus.UNKNOWN
        stored = await eventually(
            lambda: pull_all(client, cluster.broker.address, "TxCheckCommit", 0), timeout_s=15, what="checked commit"
        )
    assert [m.body for m in stored] == [b"late"]
    checked = listener.checked[0]
    assert (checked.topic, checked.queue_id, checked.msg_id, checked.tags) == (
        "TxCheckCommit",
        0,
        result.half.msg_id,
        "t",
    )
    assert all(name.startswith("transaction-check-") for name in listener.threads)


async def test_unknown_then_the_check_rolls_back(cluster: Cluster, client) -> None:
    await topic_of_one_queue(client, cluster, "TxCheckRollback")
    listener = RecordingListener(TransactionStatus.UNKNOWN, check=lambda _: TransactionStatus.ROLLBACK)
    async with producer(cluster, "tx_check_rollback", listener) as tx:
        before = await ends_stored(client, cluster)
        await tx.send_message_in_transaction(Message("TxCheckRollback", b"never"))
        await eventually(lambda: listener.checked, timeout_s=15, what="the check")
        await eventually(lambda: _more(client, cluster, before), timeout_s=15, what="the rollback's end record")
        assert await visible(client, cluster, "TxCheckRollback") == []
        # a later half message of the group is checked: the rolled back one is not checked again
        second = await tx.send_message_in_transaction(Message("TxCheckRollback", b"second"))
        await eventually(
            lambda: any(m.msg_id == second.half.msg_id for m in listener.checked), timeout_s=15, what="second check"
        )
    assert len(listener.checked) == 2


async def test_a_producer_that_never_answers_loses_the_message_to_the_check_max_topic(cluster: Cluster, client) -> None:
    await topic_of_one_queue(client, cluster, "TxNoAnswer")
    listener = RecordingListener(TransactionStatus.UNKNOWN)  # every check answered unknown
    async with producer(cluster, "tx_no_answer", listener) as tx:
        moved_before = await get_max_offset(client, cluster.broker.address, TRANS_CHECK_MAX_TIME_TOPIC, 0)
        first = await tx.send_message_in_transaction(Message("TxNoAnswer", b"orphan"))

        async def moved() -> bool:
            count = await get_max_offset(client, cluster.broker.address, TRANS_CHECK_MAX_TIME_TOPIC, 0)
            return count > moved_before

        await eventually(moved, timeout_s=20, what="the move to TRANS_CHECK_MAX_TIME_TOPIC")
        # a half message sent after the move is checked: by then the first is no longer checked
        second = await tx.send_message_in_transaction(Message("TxNoAnswer", b"later"))
        await eventually(
            lambda: any(m.msg_id == second.half.msg_id for m in listener.checked), timeout_s=15, what="second check"
        )
    firsts = [m for m in listener.checked if m.msg_id == first.half.msg_id]
    assert len(firsts) == 3  # transactionCheckMax
    assert [int(m.properties[props.TRANSACTION_CHECK_TIMES]) for m in firsts] == [1, 2, 3]
    assert await visible(client, cluster, "TxNoAnswer") == []
    parked = await pull_all(client, cluster.broker.address, TRANS_CHECK_MAX_TIME_TOPIC, 0)
    assert [m.body for m in parked if m.msg_id == first.half.msg_id] == [b"orphan"]


async def test_a_half_message_ended_twice_is_stored_once(cluster: Cluster, client) -> None:
    await topic_of_one_queue(client, cluster, "TxTwice")
    listener = RecordingListener(TransactionStatus.UNKNOWN, check=lambda _: TransactionStatus.COMMIT)
    async with producer(cluster, "tx_twice", listener) as tx:
        _, half = await tx.send_half(Message("TxTwice", b"once"))
        # a retry racing the first end, then a rollback after the commit: the first end decides, and
        # the rollback is refused (its producer must learn it was not done)
        await asyncio.gather(*(tx.end_transaction(half, TransactionStatus.COMMIT, wait=True) for _ in range(3)))
        with pytest.raises(SendError, match="was committed already"):
            await tx.end_transaction(half, TransactionStatus.ROLLBACK, wait=True)
        await tx.end_transaction(half, TransactionStatus.COMMIT, wait=True)
        # the check's answer (COMMIT) would race it too, were the half message still waiting: a later
        # half message of the group is checked, so this one's check would have come by then
        _, later = await tx.send_half(Message("TxTwice", b"checked"))
        await eventually(lambda: any(m.msg_id == later.msg_id for m in listener.checked), timeout_s=15, what="check")
        await eventually(lambda: _count(client, cluster, "TxTwice", 2), timeout_s=15, what="the checked commit")
    assert sorted(await visible(client, cluster, "TxTwice")) == [b"checked", b"once"]
    assert all(m.msg_id != half.msg_id for m in listener.checked)


async def _count(client: RemotingClient, cluster: Cluster, topic: str, n: int) -> bool:
    return len(await visible(client, cluster, topic)) >= n


async def test_check_immunity_holds_the_checks_off_without_counting(cluster: Cluster, client) -> None:
    await topic_of_one_queue(client, cluster, "TxImmune")
    listener = RecordingListener(TransactionStatus.UNKNOWN)
    async with producer(cluster, "tx_immune", listener) as tx:
        immune = Message("TxImmune", b"immune", properties={props.CHECK_IMMUNITY_TIME_IN_SECONDS: "2"})
        born = time.time()
        _, half = await tx.send_half(immune)
        _, plain = await tx.send_half(Message("TxImmune", b"plain"))
        # a later half message past transactionTimeOut is checked meanwhile: the immune one is passed
        await eventually(lambda: any(m.msg_id == plain.msg_id for m in listener.checked), timeout_s=15, what="check")
        assert not any(m.msg_id == half.msg_id for m in listener.checked)
        first = await eventually(
            lambda: [m for m in listener.checked if m.msg_id == half.msg_id],
            timeout_s=15,
            what="the immune one's check",
        )
    assert time.time() - born >= 2.0
    assert first[0].properties[props.TRANSACTION_CHECK_TIMES] == "1"  # no copy, nothing counted before
    assert first[0].queue_offset == half.queue_offset
