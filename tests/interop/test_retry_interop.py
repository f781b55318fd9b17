"""The real client `rocketmq==0.4.4` and our broker's retries: a message its listener raises on goes
back to the broker (CONSUMER_SEND_MSG_BACK) and comes again through the group's retry topic."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rocketspark.client.api import admin
from rocketspark.message.properties import codec as props
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.interop.conftest import Cluster
from tests.interop.driver import OutgoingMessage, RealClient, Send
from tests.waiting import eventually

pytestmark = pytest.mark.interop


@pytest.mark.slow
async def test_message_the_real_listener_raises_on_comes_back_through_the_retry_topic(
    servers: ServerFactory, remoting_client: RemotingClient, tmp_path: Path
) -> None:
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address, "--set", "messageDelayLevel=1s")  # every retry after 1 s
    home = tmp_path / "client-home"
    home.mkdir()
    client = RealClient(namesrv.address, home, [namesrv, broker])
    cluster = Cluster(namesrv, broker, client, remoting_client, [client])
    topic, group = "RealRetry", "CID_real_retry"
    try:
        # the retry topic exists and is routed before the consumer starts, so its first rebalance takes it
        for name in (topic, f"%RETRY%{group}"):
            await admin.create_topic(remoting_client, broker.address, TopicConfig(name, 1, 1))
            await cluster.route(name)
        outcomes = await asyncio.to_thread(
            client.produce, "real_retry_producer", [Send("sync", [OutgoingMessage(topic, "fails once")])]
        )
        assert outcomes[0].status == "OK", client.diagnostics()
        consumed = await asyncio.to_thread(
            client.consume, group, topic, expect=2, fail_times=1, settle_s=1.0, max_wait_s=30
        )
        assert consumed.expected_reached, client.diagnostics()
        assert [(m.body, m.reconsume_times) for m in consumed.messages] == [("fails once", 0), ("fails once", 1)]
        assert {m.topic for m in consumed.messages} == {topic}  # the client shows the original topic
        [retried] = await eventually(lambda: cluster.pull_queue(f"%RETRY%{group}", 0), what="the retried message")
        assert retried.body == b"fails once" and retried.properties[props.RETRY_TOPIC] == topic
        assert retried.reconsume_times == 1
    finally:
        client.close()
