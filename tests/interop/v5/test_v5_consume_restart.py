"""5.x consumption across a broker restart and a kill -9, with the official Python SimpleConsumer.

Handles given before the broker went down still ack their messages after it came back; what was
acked is never delivered again; what was in flight stays invisible until its time, then comes back
with its next delivery attempt; the group's offsets show every ack.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory, free_port
from tests.interop.v5.conftest import Grpc5Cluster
from tests.interop.v5.driver import Received, V5Client, V5Error, V5Message, V5SimpleConsumer
from tests.interop.v5.test_v5_consume import lag
from tests.waiting import eventually

pytestmark = [pytest.mark.interop, pytest.mark.slow]

INVISIBLE_S = 8


def ack_when_back(consumer: V5SimpleConsumer, message: Received) -> bool:
    """Ack once the client reached the broker again (its first calls may find no connection yet)."""
    try:
        consumer.ack(message)
    except V5Error as exc:
        if "INVALID_RECEIPT_HANDLE" in str(exc):
            raise
        return False
    return True


@pytest.mark.parametrize("ending", ["stop", "kill"])
async def test_invisibility_and_handles_survive_the_broker(
    servers: ServerFactory, remoting_client: RemotingClient, v5: V5Client, tmp_path: Path, ending: str
) -> None:
    namesrv = servers.namesrv()
    data_dir, port = tmp_path / "broker", free_port()
    broker = servers.broker(namesrv.address, "--grpc-port", str(port), data_dir=data_dir)
    endpoint = f"127.0.0.1:{port}"
    producer = v5.producer(endpoint, topics=["v5_durable"])
    for body in ("a", "b", "c", "d"):
        producer.send(V5Message("v5_durable", body))
    producer.shutdown()
    consumer = v5.simple_consumer(endpoint, "v5_durable_group", {"v5_durable": "*"}, await_s=1)
    received: dict[str, Received] = {}
    while len(received) < 4:
        batch = consumer.receive(max_messages=4, invisible_s=INVISIBLE_S)
        assert batch, f"only {sorted(received)} received"
        received.update((m.body, m) for m in batch)
    consumer.ack(received["a"])

    if ending == "kill":
        broker.kill()
    else:
        broker.stop()
    broker = servers.broker(namesrv.address, "--grpc-port", str(port), data_dir=data_dir)

    await eventually(lambda: ack_when_back(consumer, received["b"]), timeout_s=15, interval_s=0.5, what="the ack of b")
    again: list[Received] = []
    for _ in range(3 * INVISIBLE_S):  # long polls of 1 s: c and d come back once their time passed, never a or b
        again += consumer.receive(max_messages=4, invisible_s=30)
        if len(again) >= 2:
            break
    assert sorted((m.body, m.delivery_attempt) for m in again) == [("c", 2), ("d", 2)]
    for message in again:
        consumer.ack(message)
    assert consumer.receive(max_messages=4, invisible_s=30) == []
    cluster = Grpc5Cluster(namesrv, broker, endpoint, remoting_client)
    assert await lag(cluster, "v5_durable_group", "v5_durable") == (4, 4)
    consumer.shutdown()
