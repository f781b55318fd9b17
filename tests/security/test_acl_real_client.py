"""The real client `rocketmq==0.4.4` (C++ core) against our broker with ACL on: an independent signer.

Signed with `set_session_credentials` it sends, consumes and retries; with a wrong secret, an
unknown key, no credentials or a DENY topic it is refused and nothing is stored. A recording proxy
shows what it signs: the values of every ext field but `Signature` (its `OnsChannel` included) in
key order, then the body, as rocketspark.remoting.signing computes it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rocketspark.client.api import admin
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.remoting.client import RemotingClient
from rocketspark.remoting.signing import signature
from tests.harness import ServerFactory
from tests.interop.conftest import Cluster
from tests.interop.driver import OutgoingMessage, RealClient, Send
from tests.interop.wire import WireRecorder
from tests.security.conftest import ADMIN, DENIED_TOPIC, USER, AclBroker, start_acl_broker
from tests.waiting import eventually

pytestmark = pytest.mark.interop

CHANNEL = "ALIYUN"  # the C++ client's default OnsChannel


def credentials(access_key: str, secret_key: str) -> dict[str, str]:
    return {"access_key": access_key, "secret_key": secret_key, "channel": CHANNEL}


@pytest.fixture
async def admin_client() -> AsyncIterator[RemotingClient]:
    """Our client signing as the admin account: creates topics and reads what was stored."""
    client = RemotingClient(request_timeout_s=5.0, credentials=ADMIN)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "client-home"
    path.mkdir()
    return path


def cluster_of(acl: AclBroker, admin_client: RemotingClient, client: RealClient) -> Cluster:
    return Cluster(acl.namesrv, acl.broker, client, admin_client, [client])


def as_broker_reads(fields: dict[str, Any]) -> dict[str, str]:
    """Ext field values as the broker decodes them (JSON numbers and booleans as their text)."""
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in fields.items()}


async def test_signed_real_client_sends_and_consumes(
    acl_broker: AclBroker, admin_client: RemotingClient, home: Path
) -> None:
    topic, group = "AclRealTopic", "acl_real_consumer"
    await admin.create_topic(admin_client, acl_broker.broker.address, TopicConfig(topic, 2, 2))
    with WireRecorder(acl_broker.namesrv.address, acl_broker.broker.address) as wire:
        client = RealClient(
            wire.namesrv_address,
            home,
            [acl_broker.namesrv, acl_broker.broker],
            credentials(USER.access_key, USER.secret_key),
        )
        cluster = cluster_of(acl_broker, admin_client, client)
        try:
            await cluster.route(topic)
            sends = [
                Send("sync", [OutgoingMessage(topic, f"signed {i}", tags="T", keys=f"k{i}") for i in range(4)]),
                Send("batch", [OutgoingMessage(topic, f"batched {i}") for i in range(3)]),
            ]
            outcomes = await asyncio.to_thread(client.produce, "acl_real_producer", sends)
            assert [o.status for o in outcomes] == ["OK"] * 5, f"{outcomes}\n{client.diagnostics()}"
            consumed = await asyncio.to_thread(client.consume, group, topic, expect=7, settle_s=1.0, max_wait_s=30)
            assert consumed.expected_reached, client.diagnostics()
            assert sorted(m.body for m in consumed.messages) == sorted(
                [f"signed {i}" for i in range(4)] + [f"batched {i}" for i in range(3)]
            )
        finally:
            client.close()
        exchanges = [(q, r) for q, r in wire.exchanges() if q.link == "broker" and q.from_client]
    codes = {request.code for request, _ in exchanges}
    assert {RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE, RequestCode.HEART_BEAT} <= codes
    # this client sends its batch as SEND_MESSAGE with batch=1: a body of several messages, signed whole
    assert any(q.code == RequestCode.SEND_MESSAGE and q.ext_fields.get("batch") == "1" for q, _ in exchanges)
    for request, response in exchanges:
        fields = as_broker_reads(request.ext_fields)
        assert fields["AccessKey"] == USER.access_key and fields["OnsChannel"] == CHANNEL
        assert fields["Signature"] == signature(USER.secret_key, fields, request.body), request
        if response is not None:
            assert response.code != ResponseCode.NO_PERMISSION, (request, response)


@pytest.mark.parametrize(
    ("signer", "topic", "reason"),
    [
        (
            credentials(USER.access_key, "wrong-secret-1"),
            "AclRefused",
            "signature does not match for access key rocketspark_user",
        ),
        (credentials("stranger_key", "stranger-secret"), "AclRefused", "access key stranger_key has no account"),
        (None, "AclRefused", "carries no AccessKey"),
        (credentials(USER.access_key, USER.secret_key), DENIED_TOPIC, f"PUB on topic {DENIED_TOPIC} for access key"),
    ],
    ids=["wrong-secret", "unknown-key", "unsigned", "deny-topic"],
)
async def test_refused_real_client_stores_nothing(
    acl_broker: AclBroker,
    admin_client: RemotingClient,
    home: Path,
    signer: dict[str, str] | None,
    topic: str,
    reason: str,
) -> None:
    await admin.create_topic(admin_client, acl_broker.broker.address, TopicConfig(topic, 1, 1))
    with WireRecorder(acl_broker.namesrv.address, acl_broker.broker.address) as wire:
        client = RealClient(wire.namesrv_address, home, [acl_broker.namesrv, acl_broker.broker], signer)
        cluster = cluster_of(acl_broker, admin_client, client)
        try:
            await cluster.route(topic)
            outcomes = await asyncio.to_thread(
                client.produce, "acl_refused_producer", [Send("sync", [OutgoingMessage(topic, "refused")])]
            )
        finally:
            client.close()
        sends = [(q, r) for q, r in wire.exchanges() if q.link == "broker" and q.code == RequestCode.SEND_MESSAGE]
    assert outcomes[0].status is None and outcomes[0].error, outcomes
    assert sends, "the client sent nothing to the broker"
    for _, response in sends:
        assert response is not None and response.code == ResponseCode.NO_PERMISSION
        assert reason in response.header.get("remark", ""), response
        assert "secret" not in response.header.get("remark", "")
    assert await cluster.max_offset(topic, 0) == 0


@pytest.mark.slow
async def test_delays_and_retries_work_with_acl_on(
    servers: ServerFactory, admin_client: RemotingClient, home: Path, acl_file: Path
) -> None:
    """Internal topics: a delayed message goes through SCHEDULE_TOPIC_XXXX, and a failed one through
    CONSUMER_SEND_MSG_BACK and %RETRY%<group>, while every client request is checked."""
    acl = start_acl_broker(servers, acl_file, "--set", "messageDelayLevel=1s")
    topic, group = "AclRetryTopic", "acl_retry_group"
    client = RealClient(
        acl.namesrv.address, home, [acl.namesrv, acl.broker], credentials(USER.access_key, USER.secret_key)
    )
    cluster = cluster_of(acl, admin_client, client)
    try:
        for name in (topic, f"%RETRY%{group}"):
            await admin.create_topic(admin_client, acl.broker.address, TopicConfig(name, 1, 1))
            await cluster.route(name)
        message = OutgoingMessage(topic, "delayed, then fails once", properties={"DELAY": "1"})
        outcomes = await asyncio.to_thread(client.produce, "acl_retry_producer", [Send("sync", [message])])
        assert outcomes[0].status == "OK", client.diagnostics()
        consumed = await asyncio.to_thread(
            client.consume, group, topic, expect=2, fail_times=1, settle_s=1.0, max_wait_s=30
        )
        assert consumed.expected_reached, client.diagnostics()
        assert [m.reconsume_times for m in consumed.messages] == [0, 1]
        [retried] = await eventually(lambda: cluster.pull_queue(f"%RETRY%{group}", 0), what="the retried message")
        assert retried.body == b"delayed, then fails once"
    finally:
        client.close()
    assert "NO_PERMISSION" not in acl.broker.log_tail(200) and "refused" not in acl.broker.log_tail(200)
