"""Every client path over TLS, against a name server and a broker that both refuse plain TCP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from rocketspark import (
    AsyncLitePullConsumer,
    AsyncProducer,
    AsyncPushConsumer,
    ConsumeFromWhere,
    ConsumeStatus,
    LitePullConsumer,
    Message,
    MessageExt,
    Producer,
)
from rocketspark.client.api import admin
from rocketspark.client.api.route import get_cluster_info, get_route
from rocketspark.client.config import ClientConfig
from rocketspark.errors import ConfigError, ConnectionClosedError, RemotingError
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.cli.conftest import run_cli
from tests.tls.conftest import TlsCluster
from tests.waiting import eventually

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.fixture
async def tls_admin(tls_cluster: TlsCluster) -> AsyncIterator[RemotingClient]:
    client = RemotingClient(request_timeout_s=5.0, **tls_cluster.client_options)
    yield client
    await client.close()


async def test_admin_helpers_over_tls(tls_cluster: TlsCluster, tls_admin: RemotingClient) -> None:
    broker = tls_cluster.broker.address
    info = await get_cluster_info(tls_admin, tls_cluster.namesrv.address)
    assert [b.master_address for b in info.broker_addr_table.values()] == [broker]
    await admin.create_topic(tls_admin, broker, TopicConfig("TlsAdmin", read_queue_nums=2, write_queue_nums=2))
    route = await eventually(
        lambda: get_route(tls_admin, tls_cluster.namesrv.address, "TlsAdmin"), what="the new topic's route"
    )
    assert route.queue_datas[0].read_queue_nums == 2
    assert "TlsAdmin" in (await admin.get_all_topic_config(tls_admin, broker)).topic_config_table
    plain = RemotingClient()
    try:  # the broker refuses the same request over plain TCP
        with pytest.raises(ConnectionClosedError):
            await admin.get_all_topic_config(plain, broker)
    finally:
        await plain.close()


def test_sync_producer_and_lite_pull_consumer_over_tls(tls_cluster: TlsCluster) -> None:
    options = {"namesrv_addr": tls_cluster.namesrv.address, **tls_cluster.client_options}
    bodies = [f"sync {i}".encode() for i in range(10)]
    with Producer("tls_sync_producer", **options) as producer:
        for body in bodies:
            producer.send(Message("TlsSync", body))
    received: list[bytes] = []
    with LitePullConsumer("tls_sync_consumer", consume_from_where=FIRST, **options) as consumer:
        consumer.subscribe("TlsSync")
        for _ in range(40):
            received.extend(m.body for m in consumer.poll(500))
            if len(received) >= len(bodies):
                break
    assert sorted(received) == sorted(bodies)


async def test_async_producer_lite_pull_and_push_consumers_over_tls(tls_cluster: TlsCluster) -> None:
    options = {"namesrv_addr": tls_cluster.namesrv.address, **tls_cluster.client_options}
    bodies = [f"async {i}".encode() for i in range(10)]
    async with AsyncProducer("tls_async_producer", **options) as producer:
        for body in bodies:
            await producer.send(Message("TlsAsync", body))
    pulled: list[bytes] = []
    async with AsyncLitePullConsumer("tls_pull", consume_from_where=FIRST, **options) as consumer:
        consumer.subscribe("TlsAsync")

        async def pulled_all() -> bool:
            pulled.extend(m.body for m in await consumer.poll(200))
            return len(pulled) >= len(bodies)

        await eventually(pulled_all, timeout_s=20, what="every message pulled")
    assert sorted(pulled) == sorted(bodies)
    pushed: list[bytes] = []

    def listener(messages: list[MessageExt]) -> ConsumeStatus:
        pushed.extend(m.body for m in messages)
        return ConsumeStatus.CONSUME_SUCCESS

    push = AsyncPushConsumer("tls_push", consume_from_where=FIRST, **options)
    push.subscribe("TlsAsync")
    push.register_listener(listener)
    await push.start()
    try:
        await eventually(lambda: sorted(pushed) == sorted(bodies), timeout_s=20, what="every message pushed")
    finally:
        await push.shutdown()


def test_cli_over_tls(tls_cluster: TlsCluster) -> None:
    namesrv = tls_cluster.namesrv.address
    tls = ("--tls", "--tls-trust", str(tls_cluster.certs.ca))
    assert run_cli(*tls, "topic", "create", "TlsCli", "--queues", "2", namesrv=namesrv).code == 0
    sent = run_cli(*tls, "produce", "TlsCli", namesrv=namesrv, stdin="one\ntwo\n")
    assert sent.code == 0, sent.err
    read = run_cli(*tls, "consume", "TlsCli", "--offset", "earliest", "--max", "2", "--json", namesrv=namesrv)
    assert read.code == 0, read.err
    assert sorted(json.loads(line)["body"] for line in read.out.splitlines()) == ["one", "two"]
    untrusted = run_cli("--tls", "topic", "list", namesrv=namesrv)  # the system's CAs did not sign it
    assert untrusted.code == 1
    assert "not trusted" in untrusted.err
    for after in (tls, ("--tls", "--tls-trust", "any")):  # after the command too, as --namesrv
        listed = run_cli("topic", "list", *after, namesrv=namesrv)
        assert listed.code == 0, listed.err
        assert "TlsCli" in listed.out
    split = run_cli("--tls", "topic", "list", "--tls-trust", str(tls_cluster.certs.ca), namesrv=namesrv)
    assert split.code == 0, split.err


async def test_a_plain_client_cannot_use_the_enforcing_cluster(tls_cluster: TlsCluster) -> None:
    producer = AsyncProducer("plain_producer", namesrv_addr=tls_cluster.namesrv.address, send_timeout_ms=2_000)
    await producer.start()
    try:
        with pytest.raises(RemotingError):
            await producer.send(Message("TlsPlain", b"refused"))
    finally:
        await producer.shutdown()


def test_a_trust_without_tls_is_an_error() -> None:
    with pytest.raises(ConfigError, match="tls_trust needs use_tls=True"):
        ClientConfig(namesrv_addr="127.0.0.1:9876", tls_trust="insecure")
    with pytest.raises(ConfigError, match="tls_trust needs use_tls=True"):
        AsyncProducer("no_tls", namesrv_addr="127.0.0.1:9876", tls_trust="insecure")
    for args in (("--tls-trust", "insecure", "topic", "list"), ("topic", "list", "--tls-trust", "insecure")):
        refused = run_cli(*args, namesrv="127.0.0.1:9876")
        assert refused.code == 2
        assert "--tls-trust needs --tls" in refused.err
