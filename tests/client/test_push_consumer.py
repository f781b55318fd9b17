"""Push consumer against a broker subprocess: rebalancing members, broadcasting, orderly, flow control."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocketspark import (
    AsyncProducer,
    AsyncPushConsumer,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    PushConsumer,
)
from rocketspark.client.api import admin, client_manage, offset
from rocketspark.client.api.route import get_route
from rocketspark.client.consumer.push.process_queue import Backlog
from rocketspark.client.consumer.push.pull_service import FLOW_CONTROL_DELAY_S
from rocketspark.errors import ValidationError
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.client.conftest import Cluster
from tests.waiting import eventually

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


class Recorder:
    """A concurrent listener that keeps what it was given (thread-safe), optionally slowly."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.messages: list[MessageExt] = []
        self.lock = threading.Lock()
        self.delay_s = delay_s

    def __call__(self, messages: list[MessageExt]) -> ConsumeStatus:
        if self.delay_s:
            time.sleep(self.delay_s)
        with self.lock:
            self.messages.extend(messages)
        return ConsumeStatus.CONSUME_SUCCESS

    def bodies(self) -> Counter[bytes]:
        with self.lock:
            return Counter(m.body for m in self.messages)

    def queues(self) -> set[MessageQueue]:
        with self.lock:
            return {m.message_queue for m in self.messages}


async def create_topic(cluster: Cluster, topic: str, queues: int) -> None:
    """Create `topic` and wait for the name server to route it (the broker registers it shortly)."""
    remoting = RemotingClient()
    try:
        await admin.create_topic(remoting, cluster.broker.address, TopicConfig(topic, queues, queues))

        async def routed() -> bool:
            route = await get_route(remoting, cluster.namesrv_addr, topic)
            return [q.write_queue_nums for q in route.queue_datas] == [queues]

        await eventually(routed, timeout_s=10, what=f"a route of {topic}")
    finally:
        await remoting.close()


async def send_round_robin(cluster: Cluster, topic: str, bodies: list[bytes], pause_s: float = 0.0) -> None:
    async with AsyncProducer(f"{topic}_producer", namesrv_addr=cluster.namesrv_addr) as producer:
        queues = await producer.fetch_publish_queues(topic)
        for i, body in enumerate(bodies):
            await producer.send(Message(topic, body), queue=queues[i % len(queues)])
            if pause_s:
                await asyncio.sleep(pause_s)


def push_consumer(cluster: Cluster, group: str, listener: Any, topic: str, **options: Any) -> AsyncPushConsumer:
    consumer = AsyncPushConsumer(group, namesrv_addr=cluster.namesrv_addr, consume_from_where=FIRST, **options)
    consumer.subscribe(topic)
    consumer.register_listener(listener)
    return consumer


def exactly(recorders: list[Recorder], expected: list[bytes]) -> Callable[[], bool]:
    def check() -> bool:
        return sum((r.bodies() for r in recorders), Counter()) == Counter(expected)

    return check


def no_consume_threads() -> bool:
    return not [t for t in threading.enumerate() if t.name.startswith("ConsumeMessageThread_")]


@pytest.mark.parametrize("by_notify", [True, False], ids=["notify", "period"])
async def test_two_members_split_the_queues_and_the_survivor_takes_all(cluster: Cluster, by_notify: bool) -> None:
    topic, group = f"PushSplit{int(by_notify)}", f"push_split_{int(by_notify)}"
    await create_topic(cluster, topic, 8)
    # by notify: a period far longer than the test; by period: notifies ignored, a short period
    interval = 120_000 if by_notify else 1_000
    first, second = Recorder(delay_s=0.01), Recorder(delay_s=0.01)  # slow enough to build a backlog
    options = {"rebalance_interval_ms": interval, "broker_suspend_max_time_ms": 2_000, "consume_thread_max": 2}
    a = push_consumer(cluster, group, first, topic, consume_thread_min=2, **options)
    b = push_consumer(cluster, group, second, topic, consume_thread_min=2, **options)
    assert a.client_config.instance_name != b.client_config.instance_name
    await a.start()
    try:
        await eventually(lambda: len(a.assignment()) == 8, timeout_s=10, what="all queues for the only member")
        if not by_notify:
            a._running_parts.instance._consumers[group].on_ids_changed = None  # type: ignore[union-attr]
        await b.start()
        try:
            await eventually(
                lambda: len(a.assignment()) == 4 and len(b.assignment()) == 4, timeout_s=10, what="four queues each"
            )
            assert a.assignment().isdisjoint(b.assignment())
            before = [f"before {i}".encode() for i in range(80)]
            await send_round_robin(cluster, topic, before)
            await eventually(exactly([first, second], before), timeout_s=10, what="every message once")
            assert first.queues() == a.assignment() and second.queues() == b.assignment()
            # the second member leaves with a backlog in its process queues, while messages keep coming
            await send_round_robin(cluster, topic, [f"burst {i}".encode() for i in range(80)])
            sending = asyncio.create_task(
                send_round_robin(cluster, topic, [f"during {i}".encode() for i in range(40)], pause_s=0.01)
            )
            await eventually(lambda: second.bodies() - Counter(before), timeout_s=5, what="the burst arriving")
        finally:
            await b.shutdown()
        # by notify: back long before the 120 s period could have done it
        await eventually(lambda: len(a.assignment()) == 8, timeout_s=10, what="every queue back")
        await sending
        expected = before + [f"{kind} {i}".encode() for kind, n in (("burst", 80), ("during", 40)) for i in range(n)]
        await eventually(exactly([first, second], expected), timeout_s=10, what="no message lost, none twice")
    finally:
        await a.shutdown()
    assert exactly([first, second], expected)()  # nothing arrived twice later either
    assert no_consume_threads()


async def test_broadcasting_delivers_every_message_to_every_consumer(cluster: Cluster, tmp_path: Path) -> None:
    topic, group = "PushBroadcast", "push_broadcast"
    await create_topic(cluster, topic, 4)
    recorders = [Recorder(), Recorder()]
    consumers = [
        push_consumer(
            cluster,
            group,
            recorder,
            topic,
            message_model=MessageModel.BROADCASTING,
            offset_store_dir=tmp_path,
            broker_suspend_max_time_ms=2_000,
        )
        for recorder in recorders
    ]
    for consumer in consumers:
        await consumer.start()
    try:
        for consumer in consumers:
            await eventually(lambda c=consumer: len(c.assignment()) == 4, timeout_s=10, what="every queue")
        bodies = [f"everyone {i}".encode() for i in range(40)]
        await send_round_robin(cluster, topic, bodies)
        for recorder in recorders:
            await eventually(exactly([recorder], bodies), timeout_s=10, what="every message")
    finally:
        for consumer in consumers:
            await consumer.shutdown()
    files = await asyncio.to_thread(lambda: sorted(tmp_path.glob(f"*/{group}/offsets.json")))
    assert len(files) == 2  # one local store per consumer: two members of one process keep their own
    for recorder in recorders:
        assert recorder.bodies() == Counter(bodies)  # nothing more arrived before shutdown


async def test_orderly_keeps_queue_order_on_many_threads_and_holds_the_locks(cluster: Cluster) -> None:
    topic, group = "PushOrderly", "push_orderly"
    await create_topic(cluster, topic, 4)
    per_queue = 25
    consumed: dict[int, list[int]] = {}
    active: Counter[int] = Counter()
    problems: list[str] = []
    threads: set[str] = set()
    suspended: list[int] = []
    lock = threading.Lock()

    def listener(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
        queue_id = messages[0].queue_id
        with lock:
            active[queue_id] += 1
            if active[queue_id] > 1:
                problems.append(f"queue {queue_id} in two threads at once")
            threads.add(threading.current_thread().name)
        try:
            time.sleep(0.002)
            fifth = [m for m in messages if queue_id == 1 and m.queue_offset == 5]
            if fifth:
                suspended.append(fifth[0].reconsume_times)
                if len(suspended) == 1:
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            with lock:
                consumed.setdefault(queue_id, []).extend(m.queue_offset for m in messages)
            return ConsumeOrderlyStatus.SUCCESS
        finally:
            with lock:
                active[queue_id] -= 1

    consumer = AsyncPushConsumer(
        group,
        namesrv_addr=cluster.namesrv_addr,
        consume_from_where=FIRST,
        consume_thread_min=4,
        consume_thread_max=4,
        consume_message_batch_max_size=2,
        suspend_current_queue_time_ms=100,
        broker_suspend_max_time_ms=2_000,
    )
    consumer.subscribe(topic)
    consumer.register_listener(listener, orderly=True)
    remoting = RemotingClient()
    queues = [MessageQueue(topic, "broker-a", i) for i in range(4)]
    try:
        async with consumer:
            await eventually(lambda: len(consumer.assignment()) == 4, timeout_s=10, what="every queue")
            taken = await client_manage.lock_batch(remoting, cluster.broker.address, group, "someone-else", queues)
            assert taken == []  # the consumer holds the broker locks
            async with AsyncProducer("push_orderly_producer", namesrv_addr=cluster.namesrv_addr) as producer:
                for i in range(per_queue):
                    await asyncio.gather(*(producer.send(Message(topic, f"{q}:{i}".encode()), queue=q) for q in queues))
            await eventually(
                lambda: sum(len(v) for v in consumed.values()) >= 4 * per_queue, timeout_s=15, what="every message"
            )
        assert problems == []
        assert consumed == {q: list(range(per_queue)) for q in range(4)}
        assert suspended == [0, 1]  # retried in place, once, counted in reconsume_times
        assert len(threads) > 1
        released = await client_manage.lock_batch(remoting, cluster.broker.address, group, "someone-else", queues)
        assert sorted(released) == queues  # shutdown released the locks
    finally:
        await remoting.close()
    assert no_consume_threads()


@pytest.mark.parametrize("by_size", [False, True], ids=["count", "bytes"])
async def test_flow_control_bounds_the_backlog_of_a_slow_listener(cluster: Cluster, by_size: bool) -> None:
    topic, group = f"PushFlow{int(by_size)}", f"push_flow_{int(by_size)}"
    await create_topic(cluster, topic, 1)
    body_size = 64 * 1024 if by_size else 10
    count = 120
    bodies = [f"{i:06d}".encode().ljust(body_size, b".") for i in range(count)]
    async with AsyncProducer(f"{group}_producer", namesrv_addr=cluster.namesrv_addr) as producer:
        (queue,) = await producer.fetch_publish_queues(topic)
        await producer.send_batch([Message(topic, b) for b in bodies], queue=queue)
    limits: dict[str, Any] = {"pull_threshold_size_for_queue": 1} if by_size else {"pull_threshold_for_queue": 20}
    recorder = Recorder(delay_s=0.01)
    consumer = push_consumer(
        cluster, group, recorder, topic, consume_thread_min=2, consume_thread_max=2, pull_batch_size=8, **limits
    )
    peak_count = peak_size = 0
    async with consumer:
        deadline = time.monotonic() + 20
        while sum(recorder.bodies().values()) < count and time.monotonic() < deadline:
            for backlog in consumer.backlog().values():
                peak_count, peak_size = max(peak_count, backlog.count), max(peak_size, backlog.size)
            await asyncio.sleep(0.005)
    assert recorder.bodies() == Counter(bodies)
    if by_size:  # at most one pull beyond the bound
        assert 1024 * 1024 <= peak_size <= 1024 * 1024 + 8 * body_size
    else:  # a pull never asks for more than the bound leaves room for
        assert 16 <= peak_count <= 20


def test_blocking_push_consumer_resumes_from_committed_offsets(cluster: Cluster) -> None:
    topic, group = "PushBlocking", "push_blocking"
    asyncio.run(create_topic(cluster, topic, 2))
    recorder = Recorder()
    options = {"namesrv_addr": cluster.namesrv_addr, "consume_from_where": FIRST, "broker_suspend_max_time_ms": 2_000}
    consumer = PushConsumer(group, **options)
    with pytest.raises(ValidationError, match="register_listener"):
        consumer.start()
    consumer.subscribe(topic)
    consumer.register_listener(recorder)
    with consumer:
        asyncio.run(send_round_robin(cluster, topic, [b"one", b"two"]))
        asyncio.run(eventually(exactly([recorder], [b"one", b"two"]), timeout_s=10, what="the first two"))
        asyncio.run(create_topic(cluster, "PushBlockingLate", 1))
        consumer.subscribe("PushBlockingLate")  # a second topic, once running
        asyncio.run(send_round_robin(cluster, "PushBlockingLate", [b"late"]))
        asyncio.run(eventually(exactly([recorder], [b"one", b"two", b"late"]), timeout_s=10, what="the late topic"))
    asyncio.run(send_round_robin(cluster, topic, [b"three"]))
    again = Recorder()
    resumed = PushConsumer(group, **options)
    resumed.subscribe(topic)
    resumed.register_listener(again)
    with resumed:
        asyncio.run(eventually(exactly([again], [b"three"]), timeout_s=10, what="only what came after"))
    assert no_consume_threads()


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValidationError, match="unknown push consumer option"):
        PushConsumer("bad_options", namesrv_addr="127.0.0.1:1", pull_treshold_for_queue=5)
    with pytest.raises(ValidationError, match="must be positive: pull_batch_size"):
        AsyncPushConsumer("bad_options", namesrv_addr="127.0.0.1:1", pull_batch_size=0)
    with pytest.raises(ValidationError, match="exceeds consume_thread_max"):
        AsyncPushConsumer("bad_options", namesrv_addr="127.0.0.1:1", consume_thread_min=4, consume_thread_max=2)


async def test_span_flow_control_stops_pulling_behind_a_stuck_message(cluster: Cluster) -> None:
    topic, group = "PushSpan", "push_span"
    await create_topic(cluster, topic, 1)
    bodies = [f"{i:03d}".encode() for i in range(100)]
    async with AsyncProducer(f"{group}_producer", namesrv_addr=cluster.namesrv_addr) as producer:
        (queue,) = await producer.fetch_publish_queues(topic)
        await producer.send_batch([Message(topic, b) for b in bodies], queue=queue)
    release = threading.Event()
    recorder = Recorder()

    def listener(messages: list[MessageExt]) -> ConsumeStatus:
        if messages[0].queue_offset == 0:
            release.wait(10)  # the oldest message is stuck, and with it the only consume thread
        return recorder(messages)

    consumer = push_consumer(
        cluster,
        group,
        listener,
        topic,
        consume_concurrently_max_span=10,
        pull_batch_size=8,
        consume_thread_min=1,
        consume_thread_max=1,
    )
    async with consumer:
        await eventually(lambda: consumer.backlog().get(queue, Backlog(0, 0, 0)).span > 10, timeout_s=10, what="a span")
        # a pull past the bound would follow the last one at once; pulling rests FLOW_CONTROL_DELAY_S at a time
        await asyncio.sleep(6 * FLOW_CONTROL_DELAY_S)
        backlog = consumer.backlog()[queue]
        assert backlog.count == backlog.span + 1 <= 10 + 8  # one pull beyond the bound at most
        release.set()
        await eventually(exactly([recorder], bodies), timeout_s=10, what="every message once released")


async def test_orderly_queues_move_between_members_in_order(cluster: Cluster) -> None:
    topic, group = "PushOrderlyHandover", "push_orderly_handover"
    await create_topic(cluster, topic, 4)
    log_lock = threading.Lock()
    seen: list[tuple[str, int, int]] = []  # (member, queue id, offset) in the order consumed

    def member(name: str) -> Callable[[list[MessageExt]], ConsumeOrderlyStatus]:
        def listener(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
            time.sleep(0.005)
            with log_lock:
                seen.extend((name, m.queue_id, m.queue_offset) for m in messages)
            return ConsumeOrderlyStatus.SUCCESS

        return listener

    consumers = {}
    for name in ("a", "b"):
        consumer = AsyncPushConsumer(
            group, namesrv_addr=cluster.namesrv_addr, consume_from_where=FIRST, broker_suspend_max_time_ms=2_000
        )
        consumer.subscribe(topic)
        consumer.register_listener(member(name), orderly=True)
        consumers[name] = consumer
    a, b = consumers["a"], consumers["b"]
    await a.start()
    try:
        await b.start()
        try:
            await eventually(
                lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, timeout_s=10, what="two queues each"
            )
            async with AsyncProducer("orderly_handover_producer", namesrv_addr=cluster.namesrv_addr) as producer:
                queues = await producer.fetch_publish_queues(topic)
                for i in range(30):
                    await asyncio.gather(*(producer.send(Message(topic, f"{i}".encode()), queue=q) for q in queues))
                await eventually(lambda: len(seen) >= 40, timeout_s=10, what="consumption under way")
        finally:
            await b.shutdown()  # with messages of its queues still to consume
        await eventually(lambda: len(a.assignment()) == 4, timeout_s=5, what="a takes b's queues at once")
        await eventually(lambda: len(seen) >= 120, timeout_s=15, what="every message")
    finally:
        await a.shutdown()
    # a consumed each taken queue to its end: a message consumed twice would be in `seen` by now,
    # ahead of the later offsets of its queue (shutdown waits for the listener)
    remoting = RemotingClient()
    try:
        for queue in queues:
            committed = await offset.query_consumer_offset(
                remoting, cluster.broker.address, group, topic, queue.queue_id
            )
            assert committed == 30, f"{queue}: committed {committed}"
    finally:
        await remoting.close()
    for queue_id in range(4):
        offsets = [offset for _, q, offset in seen if q == queue_id]
        assert offsets == list(range(30)), f"queue {queue_id}: {offsets}"
    assert {name for name, _, _ in seen} == {"a", "b"}


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
async def test_a_reset_to_a_time_has_the_member_consume_again(cluster: Cluster, orderly: bool) -> None:
    """INVOKE_BROKER_TO_RESET_OFFSET (the dashboard's reset) with the member online: the broker tells
    it (RESET_CONSUMER_CLIENT_OFFSET), and it consumes every message again from the time on."""
    topic, group = f"PushReset{int(orderly)}", f"push_reset_{int(orderly)}"
    await create_topic(cluster, topic, 2)
    recorder = Recorder()

    def orderly_listener(messages: list[MessageExt]) -> ConsumeOrderlyStatus:
        recorder(messages)
        return ConsumeOrderlyStatus.SUCCESS

    consumer = AsyncPushConsumer(
        group, namesrv_addr=cluster.namesrv_addr, consume_from_where=FIRST, broker_suspend_max_time_ms=1_000
    )
    consumer.subscribe(topic)
    consumer.register_listener(orderly_listener if orderly else recorder, orderly=orderly)
    bodies = [f"{i}".encode() for i in range(10)]
    before_ms = int(time.time() * 1000) - 1_000
    remoting = RemotingClient()
    try:
        async with consumer:
            await eventually(lambda: len(consumer.assignment()) == 2, timeout_s=10, what="both queues")
            await send_round_robin(cluster, topic, bodies)
            await eventually(exactly([recorder], bodies), timeout_s=10, what="every message")

            async def committed_all() -> bool:
                broker = cluster.broker.address
                offsets = [await offset.query_consumer_offset(remoting, broker, group, topic, q) for q in range(2)]
                return offsets == [5, 5]

            await eventually(committed_all, timeout_s=10, what="the offsets committed on the broker")
            answer = await admin.invoke_reset_offset(remoting, cluster.broker.address, topic, group, before_ms)
            assert answer is not None and sorted(answer.offset_table.values()) == [0, 0]
            await eventually(exactly([recorder], bodies * 2), timeout_s=10, what="every message again")
            await eventually(committed_all, timeout_s=10, what="the offsets committed again")
            assert len(consumer.assignment()) == 2
    finally:
        await remoting.close()
    assert exactly([recorder], bodies * 2)()  # once more each, not twice
    assert no_consume_threads()
