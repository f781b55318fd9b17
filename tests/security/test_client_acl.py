"""Our client against the bundled broker with ACL on: every path signs (send, batch, Arrow send,
oneway, pull, Arrow pull, offsets, the push consumer with a retry through `%RETRY%<group>`, admin
calls), and refusals (no credentials, a wrong secret, an unknown key, a DENY topic or group, an admin
call of a plain account) raise AccessDeniedError naming the reason and the resource and store nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from rocketspark import (
    AccessDeniedError,
    AsyncLitePullConsumer,
    AsyncProducer,
    AsyncPushConsumer,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    SessionCredentials,
)
from rocketspark.client.api import admin, offset
from rocketspark.client.api.route import get_route
from rocketspark.message.records.decoding import decode_records
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.security.conftest import ACCOUNTS, ADMIN, DENIED_GROUP, DENIED_TOPIC, USER, AclBroker, start_acl_broker
from tests.waiting import eventually

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def acl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    """One broker with ACL on for the module (tests use topics of their own); a retried message
    comes back after a second (one delay level of 1 s)."""
    base = tmp_path_factory.mktemp("client-acl")
    acl_file = base / "plain_acl.yml"
    acl_file.write_text(ACCOUNTS)
    factory = ServerFactory(base / "servers")
    try:
        yield start_acl_broker(factory, acl_file, "--set", "messageDelayLevel=1s")
    finally:
        factory.stop_all()


async def create_topic(acl: AclBroker, topic: str, queues: int = 2) -> None:
    """Created through the admin helpers by the admin account; waits for the name server's route."""
    client = RemotingClient(credentials=ADMIN)
    try:
        await admin.create_topic(client, acl.broker.address, TopicConfig(topic, queues, queues))

        async def routed() -> bool:
            route = await get_route(client, acl.namesrv.address, topic)
            return [q.write_queue_nums for q in route.queue_datas] == [queues]

        await eventually(routed, timeout_s=10, what=f"a route of {topic}")
    finally:
        await client.close()


async def stored_count(acl: AclBroker, topic: str, queues: int = 2) -> int:
    client = RemotingClient(credentials=ADMIN)
    try:
        return sum([await offset.get_max_offset(client, acl.broker.address, topic, q) for q in range(queues)])
    finally:
        await client.close()


async def test_every_client_path_signs(acl: AclBroker) -> None:
    topic, group = "AclEveryPath", "acl_every_path"
    namesrv = acl.namesrv.address
    await create_topic(acl, topic)

    # producer: single, oneway, batch, Arrow sends
    async with AsyncProducer("acl_producer", namesrv_addr=namesrv, credentials=USER) as producer:
        queues = await producer.fetch_publish_queues(topic)
        single = await producer.send(Message(topic, b"single", keys="k-single"), queue=queues[0])
        await producer.send_oneway(Message(topic, b"oneway"), queue=queues[1])
        await producer.send_batch([Message(topic, b"batch-%d" % i) for i in range(3)], queue=queues[0])
        await producer.send_arrow(pa.table({"body": [b"arrow-0", b"arrow-1"]}), topic, queue=queues[1])
    assert await eventually(lambda: stored_count(acl, topic), what="7 stored") == 7  # the oneway send may lag

    # lite pull, standard and Arrow, with the group's offsets
    for arrow in (False, True):
        async with AsyncLitePullConsumer(
            f"{group}_{arrow}", namesrv_addr=namesrv, credentials=USER, arrow=arrow, auto_commit=False
        ) as consumer:
            mqs = [MessageQueue(topic, q.broker_name, q.queue_id) for q in queues]
            consumer.assign(mqs)
            for mq in mqs:
                await consumer.seek_to_begin(mq)
            bodies: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(bodies) < 7 and time.monotonic() < deadline:
                polled = await consumer.poll(1_000)
                for item in polled:
                    if isinstance(item, pa.RecordBatch):
                        bodies.extend(item.column("body").to_pylist())
                    else:
                        bodies.append(item.body)
            assert sorted(bodies) == sorted(
                [b"single", b"oneway", b"batch-0", b"batch-1", b"batch-2", b"arrow-0", b"arrow-1"]
            )
            await consumer.commit()
            assert await consumer.committed(mqs[0]) == 4
            assert await consumer.offset_for_timestamp(mqs[0], 0) == 0
            await consumer.seek_to_end(mqs[1])

    # push consumer: a message that fails once comes back through the group's retry topic
    attempts: list[int] = []
    done = threading.Event()

    def listener(messages: list[MessageExt]) -> ConsumeStatus:
        for message in messages:
            if message.body == b"single":
                attempts.append(message.reconsume_times)
                if message.reconsume_times == 0:
                    return ConsumeStatus.RECONSUME_LATER
                done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    push = AsyncPushConsumer(
        f"{group}_push",
        namesrv_addr=namesrv,
        credentials=USER,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    push.subscribe(topic)
    push.register_listener(listener)
    await push.start()
    try:
        await eventually(done.is_set, timeout_s=30, what=f"the retried message back (attempts {attempts})")
    finally:
        await push.shutdown()
    assert attempts[:2] == [0, 1]

    # admin helpers: statistics and lookups with the plain account, deletion with the admin one
    async with _signing(USER) as client:
        stats = await admin.get_topic_stats(client, acl.broker.address, topic)
        assert sum(s.max_offset for s in stats.offset_table.values()) == 7
        consume = await admin.get_consume_stats(client, acl.broker.address, f"{group}_False", topic)
        assert sum(w.consumer_offset for w in consume.offset_table.values()) == 7
        (found,) = decode_records(await admin.query_message(client, acl.broker.address, topic, "k-single"))
        assert found.body == b"single"
        viewed = decode_records(await admin.view_message(client, acl.broker.address, found.commit_log_offset))
        assert viewed[0].msg_id == single.msg_id
    async with _signing(ADMIN) as client:
        await admin.delete_topic_in_broker(client, acl.broker.address, topic)


class _signing:
    def __init__(self, credentials: SessionCredentials | None) -> None:
        self.client = RemotingClient(credentials=credentials)

    async def __aenter__(self) -> RemotingClient:
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()


@pytest.mark.parametrize(
    ("credentials", "reason"),
    [
        (None, "carries no AccessKey"),
        (
            SessionCredentials(USER.access_key, "wrong-secret"),
            f"signature does not match for access key {USER.access_key}",
        ),
        (SessionCredentials("nobody", USER.secret_key), "access key nobody has no account"),
    ],
    ids=["unsigned", "wrong-secret", "unknown-key"],
)
async def test_a_refused_send_names_the_reason_and_stores_nothing(
    acl: AclBroker, credentials: SessionCredentials | None, reason: str
) -> None:
    topic = "AclRefusedSend"
    await create_topic(acl, topic)
    async with AsyncProducer("acl_refused", namesrv_addr=acl.namesrv.address, credentials=credentials) as producer:
        with pytest.raises(AccessDeniedError, match=reason) as refused:
            await producer.send(Message(topic, b"never stored"))
        with pytest.raises(AccessDeniedError, match=reason):
            await producer.send_arrow(pa.table({"body": [b"never stored"]}), topic)
    assert "NO_PERMISSION" in str(refused.value)
    assert "wrong-secret" not in str(refused.value)
    assert await stored_count(acl, topic) == 0


async def test_refused_resources_are_named(acl: AclBroker) -> None:
    """A DENY topic, a DENY group and an admin-only call, each refused once, naming what was refused."""
    namesrv, broker = acl.namesrv.address, acl.broker.address
    topic = "AclAllowed"
    await create_topic(acl, topic)
    await create_topic(acl, DENIED_TOPIC)
    async with AsyncProducer("acl_deny", namesrv_addr=namesrv, credentials=USER) as producer:
        with pytest.raises(AccessDeniedError, match=f"PUB on topic {DENIED_TOPIC} for access key {USER.access_key}"):
            await producer.send(Message(DENIED_TOPIC, b"x"))
    async with _signing(USER) as client:
        with pytest.raises(AccessDeniedError, match=f"SUB on group {DENIED_GROUP}"):
            await offset.query_consumer_offset(client, broker, DENIED_GROUP, topic, 0)
        with pytest.raises(AccessDeniedError, match="needs an admin account"):
            await admin.create_topic(client, broker, TopicConfig("AclNotCreated", 1, 1))
        with pytest.raises(AccessDeniedError, match=f"SUB on group {DENIED_GROUP}"):
            await offset.update_consumer_offset(client, broker, DENIED_GROUP, topic, 0, 5, oneway=False)
    assert await stored_count(acl, DENIED_TOPIC) == 0
    async with _signing(ADMIN) as client:
        assert "AclNotCreated" not in (await admin.get_all_topic_config(client, broker)).topic_config_table
        await asyncio.gather(*(admin.delete_topic_in_broker(client, broker, t) for t in (topic, DENIED_TOPIC)))
