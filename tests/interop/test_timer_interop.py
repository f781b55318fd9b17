"""Timer messages sent by the real RocketMQ client (`rocketmq==0.4.4`, C++ core), which knows no timers
but sets any property: the bundled broker parks them and stores them at their time, and the same
client's push consumer receives them then."""

from __future__ import annotations

import asyncio
import time

import pytest

from rocketspark.message.properties import codec as props
from tests.interop.conftest import Cluster
from tests.interop.driver import OutgoingMessage, Send

pytestmark = pytest.mark.interop


async def test_the_real_client_sends_timer_messages_by_property(cluster: Cluster) -> None:
    topic = "InteropTimer"
    due = int(time.time() * 1000) + 4_000  # the client process starts meanwhile
    messages = [
        OutgoingMessage(topic, "at", keys="at", properties={props.TIMER_DELIVER_MS: str(due)}),
        OutgoingMessage(topic, "in-sec", keys="in-sec", properties={props.TIMER_DELAY_SEC: "3"}),
        OutgoingMessage(topic, "in-ms", keys="in-ms", properties={props.TIMER_DELAY_MS: "2500"}),
    ]
    outcomes = await asyncio.to_thread(cluster.client.produce, "interop_timer_producer", [Send("sync", messages)])
    assert [o.status for o in outcomes] == ["OK"] * 3, cluster.client.diagnostics()
    consumed = await asyncio.to_thread(
        cluster.client.consume, "interop_timer_consumer", topic, expect=3, settle_s=0.5, max_wait_s=30
    )
    assert consumed.expected_reached, cluster.client.diagnostics()
    stored = await cluster.pull_all(topic)
    assert sorted(m.keys or "" for m in stored) == ["at", "in-ms", "in-sec"]
    for message in stored:
        late = message.store_timestamp - int(message.properties[props.TIMER_OUT_MS])
        assert 0 <= late < 100, f"{message.keys} stored {late} ms after its time"
    at = next(m for m in stored if m.keys == "at")
    assert int(at.properties[props.TIMER_OUT_MS]) == due
