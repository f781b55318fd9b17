"""The real RocketMQ client (`rocketmq==0.4.4`, C++ core) against our name server and broker.

The client always runs in a subprocess (see :mod:`tests.interop.driver`); these tests check what
came back: send results, what our broker stored (read with raw PULL_MESSAGE), what the client's push
consumers received, and the offsets it committed.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from pathlib import Path

import pytest

from rocketspark.message.message import MessageExt
from rocketspark.message.properties import codec as props
from rocketspark.protocol.codes import RequestCode, ResponseCode
from tests.interop.conftest import Cluster
from tests.interop.driver import Consumed, OutgoingMessage, Send
from tests.interop.wire import WireRecorder

pytestmark = pytest.mark.interop


def user_properties(message: MessageExt) -> dict[str, str]:
    return {k: v for k, v in message.properties.items() if k not in props.SYSTEM_KEYS}


async def produce(cluster: Cluster, group: str, sends: list[Send]) -> None:
    """Send, and check that every request reported SEND_OK."""
    outcomes = await asyncio.to_thread(cluster.client.produce, group, sends)
    failed = [o for o in outcomes if o.status != "OK"]
    assert not failed, f"sends failed: {failed[:5]}\n{cluster.client.diagnostics()}"


def tagged(topic: str, prefix: str, count: int, tags: list[str | None]) -> list[OutgoingMessage]:
    """`count` messages with keys `<prefix>-<i>`, tags cycling through `tags` and a user property `seq`."""
    return [
        OutgoingMessage(topic, f"{prefix} body {i} ✓", tags=tag, keys=f"{prefix}-{i}", properties={"seq": str(i)})
        for i, tag in zip(range(count), itertools.cycle(tags))
    ]


def assert_no_duplicates(consumed: Consumed, diagnostics: str) -> None:
    seen = Counter((m.queue_id, m.queue_offset) for m in consumed.messages)
    duplicates = {position: n for position, n in seen.items() if n > 1}
    assert not duplicates, f"delivered more than once (queue, offset): {duplicates}\n{diagnostics}"


async def test_send_sync_batch_and_orderly_round_trip(cluster: Cluster) -> None:
    """1,000 messages with send_sync, send_batch and send_orderly; our broker stores exactly them."""
    topic = "InteropRoundTrip"
    sync = [
        OutgoingMessage(
            topic,
            f"sync body {i} ünïcödé ☃",
            tags=f"Tag{'ABC'[i % 3]}",
            keys=f"sync-{i}",
            properties={"source": "sync", "seq": str(i), "colour": "grün"},
        )
        for i in range(400)
    ]
    batches = [
        [
            OutgoingMessage(
                topic,
                f"batch {b} body {j}",
                tags="TagBatch",
                keys=f"batch-{b}-{j} batch-{b}",  # two keys
                properties={"source": "batch", "seq": str(j)},
            )
            for j in range(10)
        ]
        for b in range(40)
    ]
    shards = 4
    orderly = [
        OutgoingMessage(
            topic,
            f"orderly body {shard}/{n}",
            tags="TagOrder",
            keys=f"orderly-{shard}-{n}",
            properties={"source": "orderly", "shard": str(shard), "seq": str(n)},
        )
        for n in range(50)
        for shard in range(shards)  # shards interleaved in send order
    ]
    sends = [Send("sync", sync), *(Send("batch", batch) for batch in batches)]
    sends += [Send("orderly", [message], arg=int(message.properties["shard"])) for message in orderly]
    outcomes = await asyncio.to_thread(cluster.client.produce, "PID_interop_round_trip", sends)
    stored = await cluster.pull_all(topic)
    queue_count = await cluster.queue_count(topic)
    diagnostics = cluster.client.diagnostics()
    assert len(outcomes) == 400 + 40 + 200, diagnostics
    failed = [(i, o) for i, o in enumerate(outcomes) if o.status != "OK"]
    assert not failed, f"{len(failed)} sends failed, first {failed[:5]}\n{diagnostics}"

    sent = [*sync, *(m for batch in batches for m in batch), *orderly]
    assert len(stored) == 1000, diagnostics
    assert sorted((m.keys or "", m.tags, m.body.decode(), user_properties(m)) for m in stored) == sorted(
        (m.keys or "", m.tags, m.body, m.properties) for m in sent
    ), diagnostics
    by_key = {m.keys: m for m in stored}

    # send_sync / send_orderly report the message's UNIQ_KEY and its queue offset
    single = sync + orderly
    single_outcomes = outcomes[:400] + outcomes[440:]
    reported = [(outcome.msg_id, outcome.offset) for outcome in single_outcomes]
    actual = [(by_key[m.keys].properties[props.UNIQ_KEY], by_key[m.keys].queue_offset) for m in single]
    assert reported == actual, diagnostics
    # a batch goes to one queue, at consecutive offsets in batch order from the reported offset
    for batch, outcome in zip(batches, outcomes[400:440], strict=True):
        records = [by_key[m.keys] for m in batch]
        assert {r.queue_id for r in records} == {records[0].queue_id}, diagnostics
        expected_offsets = list(range(outcome.offset, outcome.offset + len(batch)))
        assert [r.queue_offset for r in records] == expected_offsets, diagnostics
    # the hashing selector puts shard s on queue s % queue count, in send order
    for shard in range(shards):
        records = sorted((r for r in stored if r.properties.get("shard") == str(shard)), key=lambda r: r.queue_offset)
        assert {r.queue_id for r in records} == {shard % queue_count}, diagnostics
        assert [r.properties["seq"] for r in records] == [str(n) for n in range(50)], diagnostics


async def test_tag_expression_selects_exactly_the_matching_messages(cluster: Cluster) -> None:
    """A push consumer subscribed to "TagA || TagC" gets those messages, intact, and no other."""
    topic = "InteropTags"
    messages = tagged(topic, "tags", 70, ["TagA", "TagB", "TagC", "TagD", None, "TagA", "TagC"])
    await produce(cluster, "PID_interop_tags", [Send("sync", messages)])
    await cluster.route(topic)
    expected = sorted(
        (m.keys or "", m.tags, m.body, m.properties["seq"]) for m in messages if m.tags in ("TagA", "TagC")
    )

    consumed = await asyncio.to_thread(
        cluster.client.consume,
        "CID_interop_tags",
        topic,
        expect=len(expected),
        expression="TagA || TagC",
        properties=["seq"],
    )
    diagnostics = cluster.client.diagnostics()
    assert consumed.expected_reached, f"received {len(consumed.messages)} of {len(expected)}\n{diagnostics}"
    assert_no_duplicates(consumed, diagnostics)
    received = sorted((m.keys or "", m.tags, m.body, m.properties["seq"]) for m in consumed.messages)
    assert received == expected, diagnostics


async def test_orderly_consumer_sees_queue_offset_order(cluster: Cluster) -> None:
    topic = "InteropOrderly"
    messages = [
        (shard, OutgoingMessage(topic, f"ordered {shard}/{n}", tags="TagO", keys=f"ordered-{shard}-{n}"))
        for n in range(30)
        for shard in range(4)
    ]
    await produce(cluster, "PID_interop_orderly", [Send("orderly", [m], arg=shard) for shard, m in messages])
    queue_count = await cluster.queue_count(topic)
    sent_per_queue: dict[int, list[str | None]] = {}
    for shard, message in messages:
        sent_per_queue.setdefault(shard % queue_count, []).append(message.keys)

    consumed = await asyncio.to_thread(
        cluster.client.consume, "CID_interop_orderly", topic, expect=len(messages), orderly=True, max_wait_s=6.0
    )
    diagnostics = cluster.client.diagnostics()
    assert consumed.expected_reached, f"received {len(consumed.messages)} of {len(messages)}\n{diagnostics}"
    assert_no_duplicates(consumed, diagnostics)
    expected_offsets = {queue_id: list(range(len(keys))) for queue_id, keys in sent_per_queue.items()}
    assert consumed.per_queue() == expected_offsets, diagnostics
    received_per_queue = {
        queue_id: [m.keys for m in consumed.messages if m.queue_id == queue_id] for queue_id in sent_per_queue
    }
    assert received_per_queue == sent_per_queue, diagnostics


async def wait_for_pulls(recorder: WireRecorder, group: str, topic: str, count: int, timeout_s: float = 20.0) -> None:
    """Wait until the group's consumers have sent PULL_MESSAGE on `count` (connection, queue) pairs of `topic`:
    then they have chosen their start offsets, and every message sent from now on is theirs to get."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        pulling = {
            (frame.connection, frame.ext_fields.get("queueId"))
            for frame in recorder.frames
            if frame.from_client
            and frame.code == RequestCode.PULL_MESSAGE
            and frame.ext_fields.get("consumerGroup") == group
            and frame.ext_fields.get("topic") == topic
        }
        if len(pulling) >= count:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"only {len(pulling)} of {count} queues are pulled by {group}")
        await asyncio.sleep(0.1)


async def wait_for_path(root: Path, pattern: str, timeout_s: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await asyncio.to_thread(lambda: any(root.glob(pattern))):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"nothing matches {pattern} in {root} after {timeout_s:.0f} s")
        await asyncio.sleep(0.05)


async def test_broadcasting_consumers_each_receive_every_message(cluster: Cluster) -> None:
    """Two consumers of one group in BROADCASTING mode: each gets every message sent after it started.

    A new broadcasting consumer of this client starts at the queues' max offsets (its local offset
    store is empty and it consumes from the last offset), so the messages are sent once both pull."""
    topic = "InteropBroadcast"
    earlier = tagged(topic, "before-start", 1, ["TagA"])  # creates the topic; not for these consumers
    await produce(cluster, "PID_interop_broadcast", [Send("sync", earlier)])
    queue_count = await cluster.queue_count(topic)
    messages = tagged(topic, "broadcast", 40, ["TagA", "TagB"])
    group = "CID_interop_broadcast"
    with WireRecorder(cluster.namesrv.address, cluster.broker.address) as recorder:
        client = cluster.client_via(recorder.namesrv_address)
        runs = [client.start_consumer(group, topic, expect=len(messages), broadcasting=True, settle_s=1.5)]
        # the second starts once the first made its local offset directory: the client's own
        # mkdir fails when two processes create it at the same moment (seen under load)
        await wait_for_path(client.home, f".rocketmq_offsets/*/{group}")
        runs.append(client.start_consumer(group, topic, expect=len(messages), broadcasting=True, settle_s=1.5))
        try:
            await wait_for_pulls(recorder, group, topic, 2 * queue_count)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{client.diagnostics()}") from None
        await produce(cluster, "PID_interop_broadcast", [Send("sync", messages)])
        results = [await asyncio.to_thread(client.consumed, run) for run in runs]
    diagnostics = client.diagnostics()
    for consumed in results:
        assert consumed.expected_reached, f"received {len(consumed.messages)} of {len(messages)}\n{diagnostics}"
        assert_no_duplicates(consumed, diagnostics)
        assert sorted(m.keys or "" for m in consumed.messages) == sorted(m.keys or "" for m in messages), diagnostics


async def test_committed_offsets_are_readable_with_query_consumer_offset(cluster: Cluster) -> None:
    topic = "InteropOffsets"
    messages = tagged(topic, "offsets", 50, ["TagA"])
    await produce(cluster, "PID_interop_offsets", [Send("sync", messages)])
    queue_count = await cluster.queue_count(topic)
    group = "CID_interop_offsets"

    consumed = await asyncio.to_thread(cluster.client.consume, group, topic, expect=len(messages), settle_s=0.5)
    diagnostics = cluster.client.diagnostics()
    assert consumed.expected_reached, f"received {len(consumed.messages)} of {len(messages)}\n{diagnostics}"
    assert_no_duplicates(consumed, diagnostics)
    consumed_per_queue = Counter(m.queue_id for m in consumed.messages)
    assert consumed_per_queue.total() == len(messages)
    # the consumer has shut down, which commits its offsets: the next offset to consume per queue
    committed = {q: await cluster.consumer_offset(group, topic, q) for q in range(queue_count)}
    assert committed == {q: consumed_per_queue[q] for q in range(queue_count)}, diagnostics
    assert committed == {q: await cluster.max_offset(topic, q) for q in range(queue_count)}, diagnostics


async def test_every_request_of_the_real_client_is_answered(cluster: Cluster) -> None:
    """Through a recording proxy: each request the client sends while producing (all four send
    methods) and push-consuming gets one answer, none of them an error."""
    topic = "InteropWire"
    with WireRecorder(cluster.namesrv.address, cluster.broker.address) as recorder:
        client = cluster.client_via(recorder.namesrv_address)
        messages = tagged(topic, "wire", 20, ["TagA", "TagB"])
        sends = [
            Send("sync", messages[:5]),
            Send("batch", messages[5:10]),
            Send("orderly", messages[10:15], arg=1),
            Send("oneway", messages[15:]),
        ]
        outcomes = await asyncio.to_thread(client.produce, "PID_interop_wire", sends)
        await cluster.route(topic)
        consumed = await asyncio.to_thread(client.consume, "CID_interop_wire", topic, expect=len(messages))
        exchanges = recorder.exchanges()
    conversation = "\n".join(f"{request}\n  -> {response}" for request, response in exchanges)
    diagnostics = f"{client.diagnostics()}\n--- conversation:\n{conversation[-20000:]}"
    assert [o.status for o in outcomes] == ["OK"] * 11 + [None] * 5, diagnostics
    assert consumed.expected_reached, diagnostics
    assert sorted(m.keys or "" for m in consumed.messages) == sorted(m.keys or "" for m in messages), diagnostics

    acceptable: dict[int, set[int]] = {
        RequestCode.GET_ROUTEINFO_BY_TOPIC: {ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST},  # %RETRY%...
        RequestCode.PULL_MESSAGE: {ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND},
    }
    client_requests = [(request, response) for request, response in exchanges if request.from_client]
    codes = {request.code for request, _ in client_requests}
    assert {RequestCode.SEND_MESSAGE, RequestCode.HEART_BEAT, RequestCode.PULL_MESSAGE} <= codes, diagnostics
    oneway_keys = {m.keys for m in sends[-1].messages}
    for request, response in client_requests:
        if response is None:
            # The client's oneway calls (send_oneway, the offset persist) go out without the oneway flag
            # (it encodes the header before marking it) and never wait for the answer; held pulls are
            # cut off by the consumer's shutdown. The connection may close before any of these is answered.
            sent_oneway = request.code == RequestCode.SEND_MESSAGE and (
                props.decode_properties(request.ext_fields.get("properties", "")).get(props.KEYS) in oneway_keys
            )
            unawaited = sent_oneway or request.code in (RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.PULL_MESSAGE)
            assert unawaited, f"no answer to {request}\n{diagnostics}"
            continue
        allowed = acceptable.get(request.code, {ResponseCode.SUCCESS})
        assert response.code in allowed, f"{request}\n  -> {response}\n{diagnostics}"
