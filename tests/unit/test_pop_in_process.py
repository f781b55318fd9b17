"""The pop engine (broker/pop/) driven in process against a real MessageStore on tmp_path.

Receive, ack and change invisible duration with their receipt handles; redelivery after the
invisible time with a growing attempt, and the refusal of a stale or expired handle; max attempts
to %DLQ%<group>; FIFO message groups one message at a time; tag filters; long polling; the
group's consumer offsets following acks; external offset resets; push consumers' renewals.
Restarts and crashes have tests/unit/test_pop_durability.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import typing
from pathlib import Path

import pytest

from broker.managers.client_channel import ClientChannelInfo
from broker.managers.subscription_group_manager import SubscriptionGroupConfig
from broker.pop.core import PopContext, now_ms
from broker.pop.errors import PopError, Refusal
from broker.pop.filtering import message_filter
from broker.pop.handles import ReceiptHandle
from broker.pop.receiving import ReceiveRequest
from broker.pop.service import PopService
from broker.pop.settings import CLIENT_GONE_GRACE_MS
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import dlq_topic
from rocketspark.protocol.body.heartbeat import ConsumeFromWhere, ConsumeType, MessageModel
from rocketspark.protocol.codes import LanguageCode
from tests.unit.pop_parts import Clock, PopParts, bodies, receive, send, started
from tests.unit.processor_parts import GROUP, QUEUES, TOPIC, BrokerParts, open_parts, protocol_members


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def pop(parts: BrokerParts, clock: Clock) -> typing.AsyncIterator[PopService]:
    service = await started(parts, clock)
    yield service
    await service.stop()


def test_the_context_holds_exactly_what_the_engine_declares() -> None:
    assert protocol_members(PopContext) == {f.name for f in dataclasses.fields(PopParts)}


def offsets(parts: BrokerParts, group: str = GROUP) -> dict[int, int]:
    return parts.consumer_offsets.offsets(group, TOPIC)


async def refused(refusal: Refusal, call: typing.Awaitable[object]) -> str:
    with pytest.raises(PopError) as caught:
        await call
    assert caught.value.refusal is refusal, caught.value
    return str(caught.value)


async def test_received_messages_are_acked_and_the_offset_follows(parts: BrokerParts, pop: PopService) -> None:
    for i in range(3):
        await send(parts, f"m{i}".encode(), queue_id=1)
    first = await receive(pop, 2)
    assert bodies(first) == [b"m0", b"m1"]
    assert [r.delivery_attempt for r in first] == [1, 1]
    assert bodies(await receive(pop)) == [b"m2"]  # the first two are invisible
    assert await receive(pop) == []

    await pop.ack(GROUP, TOPIC, first[1].receipt_handle)
    assert offsets(parts)[1] == 0  # m0 is still in flight: the prefix is not complete
    await pop.ack(GROUP, TOPIC, first[0].receipt_handle)
    assert offsets(parts)[1] == 2
    await pop.ack(GROUP, TOPIC, first[0].receipt_handle)  # the ack of an ack: no-op
    assert offsets(parts)[1] == 2


async def test_every_queue_of_the_topic_is_read(parts: BrokerParts, pop: PopService) -> None:
    for queue_id in range(QUEUES):
        await send(parts, f"q{queue_id}".encode(), queue_id=queue_id)
    received = await receive(pop)
    assert sorted(bodies(received)) == [b"q0", b"q1", b"q2", b"q3"]
    assert sorted(ReceiptHandle.decode(r.receipt_handle).queue_id for r in received) == [0, 1, 2, 3]


async def test_an_unacked_message_comes_back_with_a_growing_attempt(
    parts: BrokerParts, pop: PopService, clock: Clock
) -> None:
    await send(parts, b"again")
    [first] = await receive(pop, invisible_ms=5_000)
    clock.advance(4_999)
    assert await receive(pop) == []
    clock.advance(1)
    [second] = await receive(pop, invisible_ms=5_000)
    assert (second.row["body"], second.delivery_attempt) == (b"again", 2)
    assert second.receipt_handle != first.receipt_handle

    message = await refused(Refusal.INVALID_RECEIPT_HANDLE, pop.ack(GROUP, TOPIC, first.receipt_handle))
    assert "stale" in message
    await pop.ack(GROUP, TOPIC, second.receipt_handle)
    assert offsets(parts)[0] == 1
    clock.advance(60_000)
    assert await receive(pop) == []


async def test_an_expired_handle_is_refused_before_anyone_else_gets_its_message(
    parts: BrokerParts, pop: PopService, clock: Clock
) -> None:
    await send(parts, b"late")
    [first] = await receive(pop, invisible_ms=2_000)
    clock.advance(2_000)
    message = await refused(Refusal.INVALID_RECEIPT_HANDLE, pop.ack(GROUP, TOPIC, first.receipt_handle))
    assert "expired" in message
    [again] = await receive(pop)
    assert again.delivery_attempt == 2


async def test_change_invisible_duration_answers_a_new_handle(
    parts: BrokerParts, pop: PopService, clock: Clock
) -> None:
    await send(parts, b"slow")
    [first] = await receive(pop, invisible_ms=2_000)
    renewed = await pop.change_invisible_duration(GROUP, TOPIC, first.receipt_handle, 30_000)
    assert renewed != first.receipt_handle
    clock.advance(10_000)
    assert await receive(pop) == []  # still invisible: the new duration counts
    await refused(Refusal.INVALID_RECEIPT_HANDLE, pop.ack(GROUP, TOPIC, first.receipt_handle))
    await pop.ack(GROUP, TOPIC, renewed)
    assert offsets(parts)[0] == 1


async def test_a_nack_makes_the_message_visible_at_the_time_asked(
    parts: BrokerParts, pop: PopService, clock: Clock
) -> None:
    await send(parts, b"nacked")
    [first] = await receive(pop, invisible_ms=60_000)
    await pop.change_invisible_duration(GROUP, TOPIC, first.receipt_handle, 1_000)
    clock.advance(1_000)
    [again] = await receive(pop)
    assert again.delivery_attempt == 2


async def test_after_the_last_attempt_the_message_goes_to_the_dead_letter_topic(
    parts: BrokerParts, pop: PopService, clock: Clock
) -> None:
    parts.subscription_groups.put(SubscriptionGroupConfig(GROUP, retry_max_times=2))  # 3 attempts
    await send(parts, b"poison")
    await send(parts, b"fine")
    attempts = []
    for _ in range(3):
        received = await receive(pop, invisible_ms=1_000)
        attempts += [(r.row["body"], r.delivery_attempt) for r in received]
        for r in received:
            if r.row["body"] == b"fine":
                await pop.ack(GROUP, TOPIC, r.receipt_handle)
        clock.advance(1_000)
    assert attempts == [(b"poison", 1), (b"fine", 1), (b"poison", 2), (b"poison", 3)]
    assert await receive(pop) == []
    assert offsets(parts)[0] == 2

    dead = await parts.store.get_messages(dlq_topic(GROUP), 0, 0, max_messages=10, max_bytes=1 << 20)
    [row] = [r for b in dead.batches() for r in b.to_pylist()]
    assert row["body"] == b"poison"
    assert row["reconsume_times"] == 3
    properties = props.decode_properties(row["properties"])
    assert properties[props.RETRY_TOPIC] == TOPIC
    assert properties[props.UNIQ_KEY] == "ID-poison"


async def test_forward_to_the_dead_letter_topic_finishes_the_message(parts: BrokerParts, pop: PopService) -> None:
    await send(parts, b"given-up")
    [first] = await receive(pop)
    await pop.forward_to_dead_letter(GROUP, TOPIC, first.receipt_handle)
    assert offsets(parts)[0] == 1
    assert parts.store.max_offset(dlq_topic(GROUP), 0) == 1
    await pop.forward_to_dead_letter(GROUP, TOPIC, first.receipt_handle)  # again: no second copy
    assert parts.store.max_offset(dlq_topic(GROUP), 0) == 1


async def test_fifo_message_groups_are_delivered_one_message_at_a_time(
    parts: BrokerParts, pop: PopService, clock: Clock
) -> None:
    for body, group in ((b"a1", "A"), (b"a2", "A"), (b"b1", "B"), (b"a3", "A"), (b"b2", "B"), (b"free", None)):
        await send(parts, body, message_group=group)
    first = await receive(pop, invisible_ms=5_000)
    assert bodies(first) == [b"a1", b"b1", b"free"]
    assert await receive(pop) == []  # a2 and b2 wait for a1 and b1

    by_body = {r.row["body"]: r for r in first}
    await pop.ack(GROUP, TOPIC, by_body[b"a1"].receipt_handle)
    await pop.ack(GROUP, TOPIC, by_body[b"free"].receipt_handle)
    assert bodies(await receive(pop, invisible_ms=5_000)) == [b"a2"]
    clock.advance(5_000)  # nothing acked: a2 and b1 come back first, and alone in their groups
    again = await receive(pop, invisible_ms=5_000)
    assert sorted((r.row["body"], r.delivery_attempt) for r in again) == [(b"a2", 2), (b"b1", 2)]
    for r in again:
        await pop.ack(GROUP, TOPIC, r.receipt_handle)
    assert sorted(bodies(await receive(pop))) == [b"a3", b"b2"]


async def test_a_fifo_message_sent_to_the_dead_letter_topic_frees_its_group(
    parts: BrokerParts, pop: PopService, clock: Clock
) -> None:
    parts.subscription_groups.put(SubscriptionGroupConfig(GROUP, retry_max_times=0))  # 1 attempt
    await send(parts, b"x1", message_group="X")
    await send(parts, b"x2", message_group="X")
    assert bodies(await receive(pop, invisible_ms=1_000)) == [b"x1"]
    clock.advance(1_000)
    assert bodies(await receive(pop)) == [b"x2"]
    assert parts.store.max_offset(dlq_topic(GROUP), 0) == 1


async def test_a_tag_filter_delivers_its_tags_and_the_offset_passes_the_others(
    parts: BrokerParts, pop: PopService
) -> None:
    for i, tags in enumerate(("TagA", "TagB", None, "TagA", "TagC")):
        await send(parts, f"m{i}".encode(), tags=tags)
    received = await receive(pop, filter=message_filter("TAG", "TagA || TagC"))
    assert bodies(received) == [b"m0", b"m3", b"m4"]
    for r in received:
        await pop.ack(GROUP, TOPIC, r.receipt_handle)
    assert offsets(parts)[0] == 5


async def test_an_sql92_filter_delivers_what_its_properties_match(parts: BrokerParts, pop: PopService) -> None:
    for i, region in enumerate(("eu", "us", None, "eu")):
        await send(parts, f"m{i}".encode(), properties={"region": region} if region else {})
    received = await receive(pop, filter=message_filter("SQL92", "region = 'eu' OR region IS NULL"))
    assert bodies(received) == [b"m0", b"m2", b"m3"]
    for r in received:
        await pop.ack(GROUP, TOPIC, r.receipt_handle)
    assert offsets(parts)[0] == 4  # m1 counts as consumed


async def test_a_long_poll_wakes_when_a_message_arrives(parts: BrokerParts, pop: PopService) -> None:
    waiting = asyncio.create_task(receive(pop, long_polling_ms=10_000))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    started_at = time.monotonic()
    await send(parts, b"awaited")
    assert bodies(await asyncio.wait_for(waiting, 5)) == [b"awaited"]
    assert time.monotonic() - started_at < 1


async def test_an_empty_long_poll_ends_at_its_time(pop: PopService) -> None:
    started_at = time.monotonic()
    assert await receive(pop, long_polling_ms=300) == []
    assert 0.25 < time.monotonic() - started_at < 2


async def test_a_long_poll_wakes_when_an_ack_frees_a_message_group(parts: BrokerParts, pop: PopService) -> None:
    await send(parts, b"f1", message_group="F")
    await send(parts, b"f2", message_group="F")
    [first] = await receive(pop)
    waiting = asyncio.create_task(receive(pop, long_polling_ms=10_000))
    await asyncio.sleep(0.05)
    await pop.ack(GROUP, TOPIC, first.receipt_handle)
    assert bodies(await asyncio.wait_for(waiting, 5)) == [b"f2"]


async def test_a_long_poll_wakes_when_an_invisible_time_passes(tmp_path: Path) -> None:
    async with open_parts(tmp_path, min_invisible_time_mills_for_recv=100) as parts:
        service = await started(parts, now_ms)
        await send(parts, b"soon")
        assert len(await receive(service, invisible_ms=300)) == 1
        started_at = time.monotonic()
        [again] = await receive(service, long_polling_ms=5_000)
        assert again.delivery_attempt == 2
        assert 0.2 < time.monotonic() - started_at < 2
        await service.stop()


async def test_refusals_name_the_fix(parts: BrokerParts, pop: PopService) -> None:
    message = await refused(Refusal.ILLEGAL_INVISIBLE_TIME, receive(pop, invisible_ms=10))
    assert "minInvisibleTimeMillsForRecv" in message
    await refused(Refusal.TOPIC_NOT_FOUND, pop.receive(ReceiveRequest(GROUP, "NoSuchTopic", 1, 10_000)))
    await refused(Refusal.INVALID_RECEIPT_HANDLE, pop.ack(GROUP, TOPIC, "not a handle"))
    await refused(Refusal.INVALID_RECEIPT_HANDLE, pop.ack(GROUP, TOPIC, ReceiptHandle(0, 0, 1, 2).encode()))
    await send(parts, b"x")
    [first] = await receive(pop)
    await refused(Refusal.ILLEGAL_INVISIBLE_TIME, pop.change_invisible_duration(GROUP, TOPIC, first.receipt_handle, -1))
    parts.subscription_groups.put(SubscriptionGroupConfig("disabled", consume_enable=False))
    await refused(Refusal.FORBIDDEN, receive(pop, group="disabled"))


async def test_a_reset_of_the_groups_offset_is_where_deliveries_start_again(
    parts: BrokerParts, pop: PopService
) -> None:
    for i in range(4):
        await send(parts, f"m{i}".encode())
    for r in await receive(pop):
        await pop.ack(GROUP, TOPIC, r.receipt_handle)
    assert offsets(parts)[0] == 4
    parts.consumer_offsets.commit(GROUP, TOPIC, 0, 1)  # as `mqadmin resetOffsetByTime` would
    assert bodies(await receive(pop)) == [b"m1", b"m2", b"m3"]


async def test_a_push_consumers_messages_are_renewed_while_its_client_stays(
    parts: BrokerParts, pop: PopService, clock: Clock
) -> None:
    channel = SessionLike()
    info = ClientChannelInfo(channel, "push-client", LanguageCode.PYTHON, 0, clock.now)
    parts.consumers.register(
        GROUP,
        info,
        consume_type=ConsumeType.CONSUME_PASSIVELY,
        message_model=MessageModel.CLUSTERING,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        subscriptions=[],
        notify=False,
    )
    await send(parts, b"long-work")
    [first] = await receive(pop, invisible_ms=0, auto_renew=True, client_id="push-client")
    assert first.invisible_ms == pop.settings.renew_slice_ms
    for _ in range(5):  # five minutes of work
        clock.advance(60_000)
        pop.renew()
        assert await receive(pop) == []
    await pop.ack(GROUP, TOPIC, first.receipt_handle)  # the handle it got stays valid
    assert offsets(parts)[0] == 1

    await send(parts, b"abandoned")
    assert len(await receive(pop, invisible_ms=0, auto_renew=True, client_id="push-client")) == 1
    parts.consumers.unregister(GROUP, channel)
    pop.renew()  # out of the group from now on
    clock.advance(CLIENT_GONE_GRACE_MS)
    pop.renew()
    assert await receive(pop) == []  # it may still come back
    clock.advance(1)
    pop.renew()
    clock.advance(pop.settings.clear_ms)
    [again] = await receive(pop)
    assert (again.row["body"], again.delivery_attempt) == (b"abandoned", 2)


class SessionLike:
    """A client's channel as the consumer manager keeps it (ClientConnection), as a 5.x session is one."""

    remote_address = "127.0.0.1:50000"

    def invoke_oneway(self, request: object) -> None:
        raise AssertionError("nothing is sent to the client here")

    def close(self, reason: str = "") -> None:
        pass


async def test_a_receive_tried_again_gets_what_the_lost_answer_held(parts: BrokerParts, pop: PopService) -> None:
    await send(parts, b"once")
    [first] = await receive(pop, attempt_id="attempt-1")
    [repeated] = await receive(pop, attempt_id="attempt-1")
    assert repeated.receipt_handle == first.receipt_handle
    assert await receive(pop, attempt_id="attempt-2") == []


async def test_messages_of_a_receive_that_never_answered_come_back_soon(
    parts: BrokerParts, pop: PopService, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await send(parts, b"orphan")
    stuck: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    monkeypatch.setattr(pop.core.journal, "written", lambda: stuck)  # the answer waits on a write forever
    receiving = asyncio.create_task(receive(pop, invisible_ms=60_000, auto_renew=True, client_id="gone"))
    for _ in range(100):
        await asyncio.sleep(0.01)
        if pop.core.tables.topics[(GROUP, TOPIC)].in_flight_count():
            break
    receiving.cancel()  # the client went away before its answer
    with pytest.raises(asyncio.CancelledError):
        await receiving
    monkeypatch.undo()
    clock.advance(pop.settings.clear_ms)
    [again] = await receive(pop)
    assert (again.row["body"], again.delivery_attempt) == (b"orphan", 2)
