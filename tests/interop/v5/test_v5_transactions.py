"""Transactional messages of the official 5.x Python client: commit, rollback, and orphaned half
messages the broker's check resolves by asking the producer over its Telemetry stream."""

from __future__ import annotations

import pytest

from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.interop.v5.conftest import Grpc5Cluster
from tests.interop.v5.driver import V5Client, V5Message
from tests.interop.v5.servers import grpc_broker
from tests.waiting import eventually

pytestmark = pytest.mark.interop

TOPIC = "v5_transactions"


@pytest.fixture
def checked_cluster(servers: ServerFactory, remoting_client: RemotingClient) -> Grpc5Cluster:
    """A broker checking half messages 1 s after they were stored, every second."""
    namesrv = servers.namesrv()
    broker, endpoint = grpc_broker(
        servers, namesrv.address, "--set", "transactionTimeOut=1000", "--set", "transactionCheckInterval=1000"
    )
    return Grpc5Cluster(namesrv, broker, endpoint, remoting_client)


async def bodies(cluster: Grpc5Cluster) -> set[str]:
    return {message.body.decode() for message in await cluster.pull_all(TOPIC)}


async def test_commit_rollback_and_orphans_resolved_by_the_check(checked_cluster: Grpc5Cluster, v5: V5Client) -> None:
    cluster = checked_cluster
    checker = {"resolutions": {"orphan-commit": "commit", "orphan-rollback": "rollback"}, "default": "rollback"}
    producer = v5.producer(cluster.endpoint, topics=[TOPIC], checker=checker)
    committed = producer.send_half(V5Message(TOPIC, "committed", keys=["own-commit"]), end="commit")
    producer.send_half(V5Message(TOPIC, "rolled back", keys=["own-rollback"]), end="rollback")
    assert committed.transaction_id
    assert await bodies(cluster) == {"committed"}  # ended by the producer at once

    orphan = producer.send_half(V5Message(TOPIC, "orphan committed", keys=["orphan-commit"]), end=None)
    producer.send_half(V5Message(TOPIC, "orphan rolled back", keys=["orphan-rollback"]), end=None)
    assert await bodies(cluster) == {"committed"}  # half messages are not visible
    # the check asks the producer (recover_orphaned_transaction_command on its Telemetry stream); its
    # checker answers with EndTransaction (source SERVER_CHECK)
    await eventually(
        lambda: len({c.message_id for c in producer.checks()}) == 2, timeout_s=20, what="both orphans checked"
    )
    assert await eventually(
        lambda: _has(cluster, "orphan committed"), timeout_s=10, what="the orphan committed by its check"
    )
    checks = {check.body: check for check in producer.checks()}
    assert checks["orphan committed"].message_id == orphan.message_id
    assert checks["orphan committed"].keys == ["orphan-commit"]
    assert checks["orphan committed"].topic == TOPIC
    producer.shutdown()
    assert await bodies(cluster) == {"committed", "orphan committed"}


async def _has(cluster: Grpc5Cluster, body: str) -> bool:
    return body in await bodies(cluster)
