"""The bundled broker's batch forms of transactional messages (docs/protocol.md, "Extensions"):
ARROW_SEND_HALF_MESSAGE stores an Arrow batch as half messages of one transaction, and
END_TRANSACTION_RANGE ends a transaction's half messages in a range of the half queue, among other
transactions', a step per request, in order, each once; through the real producer and broker.
A broker with arrowEnable=false (as flavor=apache and Apache RocketMQ) answers neither, and the
producer remembers it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pyarrow as pa
import pytest

from rocketspark.client.api import admin
from rocketspark.client.api.offset import get_max_offset
from rocketspark.client.producer.transaction import AsyncTransactionProducer, TransactionStatus
from rocketspark.errors import RequestCodeNotSupportedError, RocketMQError
from rocketspark.message.batches.producer import producer_batch
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TRANS_HALF_TOPIC
from rocketspark.processes import wait_registered
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all
from tests.transaction.conftest import BROKER_SETTINGS, Cluster, RecordingListener


@pytest.fixture(scope="module")
def standard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A broker with arrowEnable=false: the standard codes only."""
    factory = ServerFactory(tmp_path_factory.mktemp("standard-transactions"))
    try:
        namesrv = factory.namesrv()
        yield Cluster(namesrv, factory.broker(namesrv.address, *BROKER_SETTINGS, "--set", "arrowEnable=false"))
    finally:
        factory.stop_all()


async def two_queues(client: RemotingClient, cluster: Cluster, topic: str) -> list[MessageQueue]:
    await admin.create_topic(client, cluster.broker.address, TopicConfig(topic, 2, 2))
    await asyncio.to_thread(wait_registered, cluster.namesrv.address, cluster.broker.address, (topic,))
    return [MessageQueue(topic, "broker-a", q) for q in (0, 1)]


def rows(prefix: str, count: int) -> pa.RecordBatch:
    return producer_batch(
        pa.table(
            {
                "body": [f"{prefix}-{i}".encode() for i in range(count)],
                "uniq_key": [f"{prefix.upper()}{i:08d}" for i in range(count)],
                "tags": ["t"] * count,
            }
        )
    )


def producer(cluster: Cluster, group: str) -> AsyncTransactionProducer:
    return AsyncTransactionProducer(
        group, RecordingListener(TransactionStatus.UNKNOWN), client_config=cluster.client_config()
    )


async def half_offset(client: RemotingClient, cluster: Cluster) -> int:
    return await get_max_offset(client, cluster.broker.address, TRANS_HALF_TOPIC, 0)


async def test_a_range_end_commits_one_transaction_among_others_in_order(cluster: Cluster, remoting_client) -> None:
    queues = await two_queues(remoting_client, cluster, "HalfBatches")
    async with producer(cluster, "half_batches") as tx:
        first = await half_offset(remoting_client, cluster)
        sent = []
        for step in range(3):  # two transactions' batches interleave in the half queue
            for name in ("a", "b"):
                batch = rows(f"{name}{step}", 5_000 if name == "a" else 7)
                result = await tx.send_half_batch(
                    batch, queues[step % 2], transaction_id=f"txn-{name}", properties={"step": str(step)}
                )
                assert result is not None and result.count == batch.num_rows
                assert result.message_queue == queues[step % 2]  # the real queue, as a half message's answer
                sent.append(result)
        last = max(r.queue_offset + r.count - 1 for r in sent)
        assert [m.body for m in await pull_all(remoting_client, cluster.broker.address, "HalfBatches", 0)] == []

        ended = await tx.end_range("broker-a", "txn-a", first, last, TransactionStatus.COMMIT, topic="HalfBatches")
        assert ended == 15_000
        # again (a driver finishing a commit): nothing stored twice, the same count
        again = await tx.end_range("broker-a", "txn-a", first, last, TransactionStatus.COMMIT, topic="HalfBatches")
        assert again == 15_000
        stored = {q: await pull_all(remoting_client, cluster.broker.address, "HalfBatches", q) for q in (0, 1)}
        assert [m.body for m in stored[0]] == [f"a{s}-{i}".encode() for s in (0, 2) for i in range(5_000)]
        assert [m.body for m in stored[1]] == [f"a1-{i}".encode() for i in range(5_000)]
        message = stored[1][0]
        assert message.properties["step"] == "1" and message.tags == "t" and message.msg_id == "A100000000"
        assert props.REAL_TOPIC not in message.properties and props.TRANSACTION_PREPARED not in message.properties
        assert int(message.properties[props.TRANSACTION_PREPARED_QUEUE_OFFSET]) >= first

        # the other transaction is still open: rolled back, nothing of it is seen; a commit of it is refused
        assert (
            await tx.end_range("broker-a", "txn-b", first, last, TransactionStatus.ROLLBACK, topic="HalfBatches") == 21
        )
        with pytest.raises(RocketMQError, match="rolled back already"):
            await tx.end_range("broker-a", "txn-b", first, last, TransactionStatus.COMMIT, topic="HalfBatches")
        counts = [len(await pull_all(remoting_client, cluster.broker.address, "HalfBatches", q)) for q in (0, 1)]
        assert counts == [10_000, 5_000]


async def test_a_broker_without_the_batch_forms_is_remembered(standard: Cluster, remoting_client) -> None:
    queues = await two_queues(remoting_client, standard, "HalfBatchesStandard")
    async with producer(standard, "half_batches_standard") as tx:
        assert await tx.send_half_batch(rows("x", 3), queues[0], transaction_id="t", properties={}) is None
        assert not tx.serves_half_batches("broker-a")
        with pytest.raises(RequestCodeNotSupportedError):
            await tx.end_range("broker-a", "t", 0, 10, TransactionStatus.COMMIT, topic="HalfBatchesStandard")
        assert await half_offset(remoting_client, standard) == 0  # nothing was stored


async def test_a_batch_of_half_messages_is_checked_once_its_immunity_passed(cluster: Cluster, remoting_client) -> None:
    """The broker passes an immune batch whole (it reads none of it) and checks its rows once the
    immunity ran out: then every row is asked about, and the answer ROLLBACK ends them."""
    queues = await two_queues(remoting_client, cluster, "HalfBatchesImmune")
    listener = RecordingListener(TransactionStatus.UNKNOWN, check=lambda _: TransactionStatus.ROLLBACK)
    producer = AsyncTransactionProducer("half_batches_immune", listener, client_config=cluster.client_config())
    async with producer as tx:
        immunity = {props.CHECK_IMMUNITY_TIME_IN_SECONDS: "2"}
        sent = await tx.send_half_batch(rows("i", 50), queues[0], transaction_id="txn-i", properties=immunity)
        assert sent is not None
        started = asyncio.get_running_loop().time()
        await asyncio.sleep(1.5)  # five check rounds, all within the immunity
        assert listener.checked == []
        while len({m.msg_id for m in listener.checked}) < 50:
            assert asyncio.get_running_loop().time() - started < 20, "the batch was never checked"
            await asyncio.sleep(0.1)
    assert await pull_all(remoting_client, cluster.broker.address, "HalfBatchesImmune", 0) == []
