"""The official 5.x Python client's producer against the bundled broker's gRPC endpoint: NORMAL and
FIFO messages, stored as 4.x messages that 4.x clients read (our pull, and the C++ client rocketmq==0.4.4),
and the reverse: a 5.x SimpleConsumer reading what the C++ client sent; `rocketspark dev` serving 5.x clients."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

from rocketspark.client.api.route import get_route
from rocketspark.message.hashing import java_string_hash
from rocketspark.message.message import MessageExt
from rocketspark.message.properties import codec as props
from rocketspark.processes import ServerProcess
from rocketspark.remoting.client import RemotingClient
from tests.harness import dev_args, free_port
from tests.integration.broker_client import pull_all
from tests.interop.driver import OutgoingMessage, RealClient, Send
from tests.interop.v5.conftest import Grpc5Cluster
from tests.interop.v5.driver import Received, V5Client, V5Message
from tests.waiting import eventually

pytestmark = pytest.mark.interop


@pytest.fixture
def grpc_cluster(shared_grpc_cluster: Grpc5Cluster) -> Grpc5Cluster:
    """One broker for the module's tests (each uses topics and groups of its own)."""
    return shared_grpc_cluster


async def test_sent_messages_are_4x_messages(grpc_cluster: Grpc5Cluster, v5: V5Client) -> None:
    producer = v5.producer(grpc_cluster.endpoint, topics=["v5_normal"])
    receipts = [
        producer.send(
            V5Message("v5_normal", f"body-{i}", tag="TagA", keys=[f"key-{i}", "shared"], properties={"n": str(i)})
        )
        for i in range(6)
    ]
    producer.shutdown()
    stored = {message.msg_id: message for message in await grpc_cluster.pull_all("v5_normal")}
    assert set(stored) == {receipt.message_id for receipt in receipts}  # the 5.x message id is the UNIQ_KEY
    for i, receipt in enumerate(receipts):
        message = stored[receipt.message_id]
        assert message.body == f"body-{i}".encode()
        assert message.tags == "TagA"
        assert sorted(message.keys.split(" ")) == sorted([f"key-{i}", "shared"])
        assert message.properties["n"] == str(i)
        assert message.queue_offset == receipt.offset
        assert message.born_host.startswith("127.0.0.1:")
    assert len({message.queue_id for message in stored.values()}) > 1  # spread over the queues


async def test_fifo_groups_keep_one_queue_and_their_order(grpc_cluster: Grpc5Cluster, v5: V5Client) -> None:
    producer = v5.producer(grpc_cluster.endpoint, topics=["v5_fifo"])
    groups = ["orders-1", "orders-2", "orders-3"]
    for i in range(30):
        group = groups[i % 3]
        producer.send(V5Message("v5_fifo", f"{group}:{i // 3}", message_group=group))
    producer.shutdown()
    per_group: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for message in await grpc_cluster.pull_all("v5_fifo"):
        group = message.properties[props.SHARDING_KEY]
        per_group[group].append((message.queue_id, message.queue_offset, message.body.decode()))
    for group in groups:
        queues = {queue_id for queue_id, _, _ in per_group[group]}
        # the 4.x sharding-key rule: a 4.x producer with the same key writes the same queue
        assert queues == {abs(java_string_hash(group)) % 8}
        in_offset_order = [body for _, _, body in sorted(per_group[group])]
        assert in_offset_order == [f"{group}:{n}" for n in range(10)]


@pytest.mark.slow
async def test_cpp_4x_consumer_reads_what_a_5x_producer_sent(
    grpc_cluster: Grpc5Cluster, v5: V5Client, tmp_path: Path
) -> None:
    producer = v5.producer(grpc_cluster.endpoint, topics=["v5_to_4x"])
    sent = {producer.send(V5Message("v5_to_4x", f"m{i}", tag="T", keys=[f"k{i}"])).message_id for i in range(5)}
    producer.shutdown()
    home = tmp_path / "cpp-home"
    home.mkdir()
    cpp = RealClient(grpc_cluster.namesrv.address, home, [grpc_cluster.namesrv, grpc_cluster.broker])
    try:
        consumed = cpp.consume("v5_to_4x_group", "v5_to_4x", expect=5, settle_s=0.5, properties=["UNIQ_KEY"])
    finally:
        cpp.close()
    assert consumed.expected_reached, cpp.diagnostics()
    assert {m.properties["UNIQ_KEY"] for m in consumed.messages} == sent
    assert sorted(m.body for m in consumed.messages) == [f"m{i}" for i in range(5)]
    assert {m.tags for m in consumed.messages} == {"T"}


async def test_dev_serves_5x_clients(v5: V5Client, tmp_path: Path) -> None:
    port = free_port()
    process = ServerProcess(
        "rocketspark.dev",
        dev_args(tmp_path / "dev", grpc_port=port),
        tmp_path / "dev.log",
    )
    namesrv = process.start()  # the first boot line is the name server's
    client = RemotingClient()
    try:
        producer = v5.producer(f"127.0.0.1:{port}", topics=["v5_dev"])
        receipt = producer.send(V5Message("v5_dev", "through rocketspark dev"))
        producer.shutdown()
        route = await eventually(lambda: get_route(client, namesrv, "v5_dev"), what="v5_dev's route")
        broker = route.broker_datas[0].master_address
        assert broker is not None
        queues = range(route.queue_datas[0].read_queue_nums)
        stored = [m for q in queues for m in await pull_all(client, broker, "v5_dev", q, group="v5_raw_reader")]
        assert [(m.msg_id, m.body) for m in stored] == [(receipt.message_id, b"through rocketspark dev")]
    finally:
        await client.close()
        assert process.stop() == 0


@pytest.mark.slow
async def test_5x_simple_consumer_reads_what_a_cpp_4x_producer_sent(
    grpc_cluster: Grpc5Cluster, v5: V5Client, tmp_path: Path
) -> None:
    home = tmp_path / "cpp-home"
    home.mkdir()
    cpp = RealClient(grpc_cluster.namesrv.address, home, [grpc_cluster.namesrv, grpc_cluster.broker])
    messages = [
        OutgoingMessage("v4_to_5x", f"m{i}", tags="T", keys=f"k{i}", properties={"n": str(i)}) for i in range(5)
    ]
    try:
        outcomes = cpp.produce("v4_to_5x_producer", [Send("sync", messages)])
    finally:
        cpp.close()
    assert all(outcome.status == "OK" for outcome in outcomes), outcomes
    consumer = v5.simple_consumer(grpc_cluster.endpoint, "v4_to_5x_group", {"v4_to_5x": "T"}, await_s=2)
    received: list[Received] = []
    for _ in range(20):  # receives of 16 until the five are in (a receive may find fewer)
        if len(received) >= 5:
            break
        batch = consumer.receive(max_messages=16, invisible_s=30)
        for message in batch:
            consumer.ack(message)
        received += batch
    consumer.shutdown()
    assert sorted(m.body for m in received) == [f"m{i}" for i in range(5)]
    assert {m.message_id for m in received} == {outcome.msg_id for outcome in outcomes}  # UNIQ_KEY
    by_body = {m.body: m for m in received}
    for i in range(5):
        assert (by_body[f"m{i}"].tag, by_body[f"m{i}"].keys) == ("T", [f"k{i}"])
        assert by_body[f"m{i}"].properties["n"] == str(i)
        assert by_body[f"m{i}"].delivery_attempt == 1
        assert not by_body[f"m{i}"].corrupted  # the body digest checked by the client


async def test_delay_message_is_stored_in_its_topic_at_its_time(grpc_cluster: Grpc5Cluster, v5: V5Client) -> None:
    producer = v5.producer(grpc_cluster.endpoint, topics=["v5_delay"])
    due_s = int(time.time()) + 3  # the client's API takes whole seconds
    receipt = producer.send(V5Message("v5_delay", "later", delivery_timestamp=due_s))
    producer.send(V5Message("v5_delay", "now"))
    producer.shutdown()
    assert [m.body for m in await grpc_cluster.pull_all("v5_delay")] == [b"now"]  # parked until due
    stored = await eventually(
        lambda: _body(grpc_cluster, "v5_delay", b"later"), timeout_s=15, what="the delayed message in its topic"
    )
    assert stored.msg_id == receipt.message_id
    assert stored.properties[props.TIMER_DELIVER_MS] == str(due_s * 1000)
    assert stored.store_timestamp >= due_s * 1000


async def _body(cluster: Grpc5Cluster, topic: str, body: bytes) -> MessageExt | None:
    return next((m for m in await cluster.pull_all(topic) if m.body == body), None)
