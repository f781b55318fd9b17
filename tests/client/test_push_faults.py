"""Push consumer under faults, against a broker subprocess: a record the client cannot decode, an
orderly listener still running when its queue moves to another member."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from rocketspark import AsyncPushConsumer, ConsumeOrderlyStatus, MessageExt, MessageQueue
from rocketspark.client.api import client_manage, offset
from rocketspark.client.api.send import SendStatus, send_message
from rocketspark.client.consumer.push import consumer as consumer_module
from rocketspark.message import sysflag
from rocketspark.remoting.client import RemotingClient
from tests.client.conftest import Cluster
from tests.client.test_push_consumer import FIRST, Recorder, create_topic, exactly, send_round_robin
from tests.integration.broker_client import BROKER_NAME, properties, send_header
from tests.waiting import eventually


async def send_undecodable(cluster: Cluster, topic: str) -> None:
    """A record flagged zlib-compressed whose body is not zlib: stored as sent, no client can decode it."""
    remoting = RemotingClient()
    try:
        header = send_header(topic, props=properties(), sys_flag=sysflag.COMPRESSED)
        result = await send_message(
            remoting, cluster.broker.address, BROKER_NAME, header, b"not zlib at all", msg_id=""
        )
        assert result.status is SendStatus.SEND_OK
    finally:
        await remoting.close()


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
async def test_an_undecodable_record_is_logged_and_the_queue_goes_on(
    cluster: Cluster, caplog: pytest.LogCaptureFixture, orderly: bool
) -> None:
    topic, group = f"PushUndecodable{int(orderly)}", f"push_undecodable_{int(orderly)}"
    await create_topic(cluster, topic, 1)
    await send_round_robin(cluster, topic, [b"before 0", b"before 1"])
    await send_undecodable(cluster, topic)  # offset 2
    recorder = Recorder()

    def in_order(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
        recorder(messages)
        return ConsumeOrderlyStatus.SUCCESS

    consumer = AsyncPushConsumer(group, namesrv_addr=cluster.namesrv_addr, consume_from_where=FIRST)
    consumer.subscribe(topic)
    consumer.register_listener(in_order if orderly else recorder, orderly=orderly)
    after = [f"after {i}".encode() for i in range(3)]
    with caplog.at_level(logging.WARNING, logger="rocketspark.client.consumer.undecodable"):
        async with consumer:
            await eventually(exactly([recorder], [b"before 0", b"before 1"]), timeout_s=10, what="what came before")
            await send_round_robin(cluster, topic, after)  # later messages of the same queue
            await eventually(exactly([recorder], [b"before 0", b"before 1", *after]), timeout_s=10, what="the rest")
            # the listener records a batch as it starts: wait for its return, which commits the batch
            await eventually(
                lambda: consumer.backlog() and not any(b.count for b in consumer.backlog().values()),
                timeout_s=10,
                what="the last batch committed",
            )
    skipped = [r for r in caplog.records if r.levelno == logging.ERROR and "offset 2" in r.getMessage()]
    assert skipped, caplog.text
    assert f"{topic}" in skipped[0].getMessage() and "does not decompress" in skipped[0].getMessage()
    remoting = RemotingClient()

    async def everything_committed() -> bool:
        return await offset.query_consumer_offset(remoting, cluster.broker.address, group, topic, 0) == 6

    try:  # the skipped record (offset 2) counts as consumed, and shutdown commits the last offset
        # (oneway, as Java's persistAll: read until it has landed)
        await eventually(everything_committed, timeout_s=5, what="the group's offset at 6")
    finally:
        await remoting.close()


@dataclass(frozen=True)
class Call:
    member: str
    queue_id: int
    offsets: tuple[int, ...]
    start: float
    end: float


@pytest.mark.slow
async def test_an_orderly_queue_is_not_handed_over_while_its_listener_runs(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = "PushOrderlyStuck", "push_orderly_stuck"
    await create_topic(cluster, topic, 2)
    per_queue = 3
    await send_round_robin(cluster, topic, [f"{i}".encode() for i in range(2 * per_queue)])
    monkeypatch.setattr(consumer_module, "DROP_WAIT_S", 1.0)  # the wait before a drop gives up on the listener
    stuck_s = 3.0  # longer than that wait
    calls: list[Call] = []
    lock = threading.Lock()
    blocking: Counter[str] = Counter()

    def member(name: str) -> Callable[[list[MessageExt]], ConsumeOrderlyStatus]:
        def listener(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
            start = time.monotonic()
            if name == "a" and messages[0].queue_offset == 0:  # a's first batch of either queue is stuck
                with lock:
                    blocking[name] += 1
                time.sleep(stuck_s)
            with lock:
                calls.append(
                    Call(name, messages[0].queue_id, tuple(m.queue_offset for m in messages), start, time.monotonic())
                )
            return ConsumeOrderlyStatus.SUCCESS

        return listener

    consumers = {}
    for name in ("a", "b"):
        consumers[name] = AsyncPushConsumer(
            group, namesrv_addr=cluster.namesrv_addr, consume_from_where=FIRST, broker_suspend_max_time_ms=2_000
        )
        consumers[name].subscribe(topic)
        consumers[name].register_listener(member(name), orderly=True)
    a, b = consumers["a"], consumers["b"]
    everything = {(q, o) for q in range(2) for o in range(per_queue)}
    async with a:
        await eventually(lambda: blocking["a"] == 2, timeout_s=10, what="a stuck on both queues")
        async with b:  # one queue moves to b while a's listener still holds its first batch
            await eventually(lambda: len(b.assignment()) == 1, timeout_s=15, what="b owning a queue")
            await eventually(
                lambda: {(c.queue_id, o) for c in calls for o in c.offsets} == everything,
                timeout_s=15,
                what="every message",
            )
    # shutdown waited for every listener call: the record is complete
    for queue_id in range(2):
        of_queue = sorted((c for c in calls if c.queue_id == queue_id), key=lambda c: c.start)
        assert [o for c in of_queue for o in c.offsets] == list(range(per_queue)), of_queue
        for earlier, later in itertools.pairwise(of_queue):
            assert earlier.end <= later.start, f"queue {queue_id} consumed by two members at once: {earlier}, {later}"
    assert {c.member for c in calls} == {"a", "b"}


async def test_shutdown_leaves_the_lock_of_a_queue_whose_listener_still_runs(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = "PushOrderlyStuckAtShutdown", "push_orderly_stuck_at_shutdown"
    await create_topic(cluster, topic, 2)
    monkeypatch.setattr(consumer_module, "DROP_WAIT_S", 0.5)
    entered = threading.Event()

    def listener(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
        if messages[0].queue_id == 0:
            entered.set()
            time.sleep(2.0)  # still in the listener when shutdown gives up waiting for it
        return ConsumeOrderlyStatus.SUCCESS

    consumer = AsyncPushConsumer(group, namesrv_addr=cluster.namesrv_addr, consume_from_where=FIRST)
    consumer.subscribe(topic)
    consumer.register_listener(listener, orderly=True)
    async with consumer:
        await eventually(lambda: len(consumer.assignment()) == 2, timeout_s=10, what="both queues")
        await send_round_robin(cluster, topic, [b"stuck", b"free"])
        await eventually(entered.is_set, timeout_s=10, what="the listener holding queue 0")
    remoting = RemotingClient()
    try:
        queues = [MessageQueue(topic, BROKER_NAME, i) for i in range(2)]
        taken = await client_manage.lock_batch(remoting, cluster.broker.address, group, "someone-else", queues)
    finally:
        await remoting.close()
    assert taken == [queues[1]]  # queue 0 stays locked until its lock expires on the broker
