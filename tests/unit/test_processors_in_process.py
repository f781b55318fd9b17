"""The send and pull processors driven in process: no controller, no sockets, no broker started.

Requests are built as clients build them and handled as a connection handles them
(tests/unit/processor_parts.py), against a real MessageStore on tmp_path; each processor is given
a context of just the parts its Protocol (broker/context.py) declares. Here: that those contexts
match the Protocols, SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE and PULL_MESSAGE, their
refusals, and long polling. The offset requests and END_TRANSACTION have modules of their own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.managers.subscription_group_manager import SubscriptionGroupConfig
from broker.processors.admin_offset import OffsetAdminProcessor
from broker.processors.consumer_manage import ConsumerManageProcessor
from broker.processors.end_transaction import EndTransactionProcessor
from broker.processors.pull import PullMessageProcessor
from broker.processors.send import SendMessageProcessor
from rocketspark.message.ids import decode_offset_msg_id
from rocketspark.message.properties.codec import encode_properties
from rocketspark.message.records.batch_body import BatchColumns, encode_batch_body
from rocketspark.protocol.body.topic import Perm, TopicConfig
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.headers.pull import FLAG_SUBSCRIPTION, FLAG_SUSPEND, PullMessageResponseHeader
from rocketspark.protocol.headers.send import SendMessageResponseHeader
from rocketspark.remoting.processor import ProcessorTable
from tests.unit.processor_parts import (
    ADDRESS,
    BORN_MS,
    GROUP,
    QUEUES,
    TOPIC,
    BrokerParts,
    ConsumerManageParts,
    EndTransactionParts,
    FakeChannel,
    OffsetAdminParts,
    PullParts,
    SendParts,
    handle,
    narrow,
    open_parts,
    protocol_members,
    pull_request,
    pulled,
    registered,
    send_request,
)


@pytest.fixture
def table(parts: BrokerParts) -> ProcessorTable:
    return registered(SendMessageProcessor(narrow(SendParts, parts)), PullMessageProcessor(narrow(PullParts, parts)))


@pytest.mark.parametrize(
    ("processor", "context"),
    [
        (SendMessageProcessor, SendParts),
        (PullMessageProcessor, PullParts),
        (ConsumerManageProcessor, ConsumerManageParts),
        (OffsetAdminProcessor, OffsetAdminParts),
        (EndTransactionProcessor, EndTransactionParts),
    ],
)
def test_each_context_holds_exactly_what_its_processor_declares(processor: type, context: type) -> None:
    protocol = typing.get_type_hints(processor.__init__)["broker"]
    assert protocol_members(protocol) == {f.name for f in dataclasses.fields(context)}


async def test_a_sent_message_is_pulled_back(parts: BrokerParts, table: ProcessorTable) -> None:
    channel = FakeChannel()
    request = send_request(b"hello", queue_id=2, tags="TagA", keys="k1", uniq_key="UNIQ-1")
    response = await handle(table, channel, request)

    assert response.code == ResponseCode.SUCCESS, response.remark
    answer = response.decode_header(SendMessageResponseHeader)
    assert (answer.queue_id, answer.queue_offset) == (2, 0)
    host, commit_log_offset = decode_offset_msg_id(answer.msg_id)
    assert host == ADDRESS
    assert response.ext_fields["MSG_REGION"] == "DefaultRegion"
    assert response.ext_fields["TRACE_ON"] == "true"
    assert [parts.store.max_offset(TOPIC, q) for q in range(QUEUES)] == [0, 0, 1, 0]
    assert (parts.stats.standard_send_requests, parts.stats.standard_send_messages) == (1, 1)

    response = await handle(table, channel, pull_request(0, queue_id=2))
    assert response.code == ResponseCode.SUCCESS, response.remark
    header = response.decode_header(PullMessageResponseHeader)
    assert (header.next_begin_offset, header.min_offset, header.max_offset) == (1, 0, 1)
    [message] = pulled(response)
    assert message.body == b"hello"
    assert (message.topic, message.queue_id, message.queue_offset) == (TOPIC, 2, 0)
    assert (message.tags, message.keys, message.msg_id) == ("TagA", "k1", "UNIQ-1")
    assert message.commit_log_offset == commit_log_offset
    assert message.offset_msg_id == answer.msg_id
    assert (message.born_timestamp, message.born_host) == (BORN_MS, channel.remote_address)
    assert message.store_host == ADDRESS
    assert (parts.stats.standard_pull_requests, parts.stats.standard_pull_messages) == (1, 1)


async def test_v2_and_batch_sends_share_the_processor(parts: BrokerParts, table: ProcessorTable) -> None:
    handler = table.get(RequestCode.SEND_MESSAGE)
    assert table.get(RequestCode.SEND_MESSAGE_V2) == handler == table.get(RequestCode.SEND_BATCH_MESSAGE)
    channel = FakeChannel()

    request = send_request(b"v2", tags="TagA", code=RequestCode.SEND_MESSAGE_V2)
    assert request.ext_fields["b"] == TOPIC  # the one-letter names of SendMessageRequestHeaderV2
    response = await handle(table, channel, request)
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert response.decode_header(SendMessageResponseHeader).queue_offset == 0

    entries = [(0, f"m{i}".encode(), encode_properties({"TAGS": "TagB", "UNIQ_KEY": f"B{i}"})) for i in range(3)]
    request = send_request(encode_batch_body(BatchColumns.of(entries)), code=RequestCode.SEND_BATCH_MESSAGE)
    response = await handle(table, channel, request)
    assert response.code == ResponseCode.SUCCESS, response.remark
    answer = response.decode_header(SendMessageResponseHeader)
    assert (answer.queue_id, answer.queue_offset) == (0, 1)
    offsets = [decode_offset_msg_id(msg_id)[1] for msg_id in answer.msg_id.split(",")]
    assert len(offsets) == 3 and offsets == sorted(offsets)
    assert (parts.stats.standard_send_requests, parts.stats.standard_send_messages) == (2, 4)

    response = await handle(table, channel, pull_request(0))
    assert response.code == ResponseCode.SUCCESS, response.remark
    messages = pulled(response)
    assert [m.body for m in messages] == [b"v2", b"m0", b"m1", b"m2"]
    assert [m.queue_offset for m in messages] == [0, 1, 2, 3]
    assert [m.msg_id for m in messages[1:]] == ["B0", "B1", "B2"]
    assert [m.commit_log_offset for m in messages[1:]] == offsets
    assert response.decode_header(PullMessageResponseHeader).next_begin_offset == 4


@pytest.mark.parametrize(
    ("case", "code", "remark"),
    [
        ("queue id past the topic's queues", ResponseCode.SYSTEM_ERROR, f"queueId[{QUEUES}] is illegal"),
        ("topic not writable", ResponseCode.NO_PERMISSION, "is not writable"),
        ("delayed message in a batch", ResponseCode.MESSAGE_ILLEGAL, "a batch may not hold delayed"),
        ("empty body", ResponseCode.MESSAGE_ILLEGAL, "the message body is empty"),
    ],
    ids=["queue id past the write queues", "topic not writable", "delayed message in a batch", "empty body"],
)
async def test_refused_sends_store_nothing(
    parts: BrokerParts, table: ProcessorTable, case: str, code: ResponseCode, remark: str
) -> None:
    if case == "queue id past the topic's queues":
        request = send_request(b"x", queue_id=QUEUES)
    elif case == "topic not writable":
        parts.topics.put(TopicConfig("ReadOnlyTopic", 1, 1, Perm.READ))
        request = send_request(b"x", topic="ReadOnlyTopic")
    elif case == "delayed message in a batch":
        body = encode_batch_body(BatchColumns.of([(0, b"x", encode_properties({"DELAY": "2"}))]))
        request = send_request(body, code=RequestCode.SEND_BATCH_MESSAGE)
    else:
        request = send_request(b"")
    response = await handle(table, FakeChannel(), request)
    assert response.code == code
    assert remark in (response.remark or "")
    assert parts.store.commit_log.max_offset == 0
    assert parts.stats.standard_send_requests == 0


async def test_a_send_to_an_unknown_topic_creates_it_only_when_allowed(parts: BrokerParts, tmp_path: Path) -> None:
    table = registered(SendMessageProcessor(narrow(SendParts, parts)))
    response = await handle(table, FakeChannel(), send_request(b"x", topic="NewTopic", queue_id=1))
    assert response.code == ResponseCode.SUCCESS, response.remark
    created = parts.topics.get("NewTopic")
    assert created is not None
    assert (created.read_queue_nums, created.write_queue_nums) == (QUEUES, QUEUES)
    assert parts.store.max_offset("NewTopic", 1) == 1

    async with open_parts(tmp_path / "no-auto-create", auto_create_topic_enable=False) as strict:
        table = registered(SendMessageProcessor(narrow(SendParts, strict)))
        response = await handle(table, FakeChannel(), send_request(b"x", topic="NewTopic"))
        assert response.code == ResponseCode.TOPIC_NOT_EXIST
        assert strict.topics.get("NewTopic") is None
        assert strict.store.commit_log.max_offset == 0


def _disable_group(parts: BrokerParts) -> None:
    parts.subscription_groups.put(SubscriptionGroupConfig(GROUP, consume_enable=False))


def _no_group_auto_creation(parts: BrokerParts) -> None:
    parts.subscription_groups.auto_create = False


@pytest.mark.parametrize(
    ("setup", "request_fields", "code"),
    [
        (None, {"topic": "NoSuchTopic"}, ResponseCode.TOPIC_NOT_EXIST),
        (None, {"queue_id": QUEUES}, ResponseCode.SYSTEM_ERROR),
        (None, {"group": "bad group name!"}, ResponseCode.INVALID_PARAMETER),
        (None, {"flags": 0}, ResponseCode.SUBSCRIPTION_NOT_EXIST),  # no subscription sent, no consumer registered
        (_disable_group, {}, ResponseCode.NO_PERMISSION),
        (_no_group_auto_creation, {}, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST),
    ],
    ids=[
        "unknown topic",
        "queue id past the read queues",
        "bad group name",
        "no subscription",
        "group may not consume",
        "unknown group",
    ],
)
async def test_refused_pulls(
    parts: BrokerParts,
    table: ProcessorTable,
    setup: Callable[[BrokerParts], None] | None,
    request_fields: dict[str, typing.Any],
    code: ResponseCode,
) -> None:
    await handle(table, FakeChannel(), send_request(b"x"))
    if setup is not None:
        setup(parts)
    response = await handle(table, FakeChannel(), pull_request(0, **request_fields))
    assert response.code == code, response.remark
    header = response.decode_header(PullMessageResponseHeader)
    assert (header.next_begin_offset, header.min_offset, header.max_offset) == (0, 0, 0)
    assert not response.wire_body
    assert parts.stats.standard_pull_requests == 0


async def test_pulls_at_and_past_the_end_of_a_queue(table: ProcessorTable) -> None:
    channel = FakeChannel()
    for body in (b"a", b"b"):
        assert (await handle(table, channel, send_request(body))).code == ResponseCode.SUCCESS
    # (queue, offset) -> (code, next begin offset, min offset, max offset)
    expected = {
        (0, 1): (ResponseCode.SUCCESS, 2, 0, 2),
        (0, 2): (ResponseCode.PULL_NOT_FOUND, 2, 0, 2),  # OFFSET_OVERFLOW_ONE: no new message yet
        (0, 7): (ResponseCode.PULL_OFFSET_MOVED, 0, 0, 2),  # OFFSET_OVERFLOW_BADLY: back to the min offset
        (1, 0): (ResponseCode.PULL_NOT_FOUND, 0, 0, 0),  # a queue never written
        (1, 5): (ResponseCode.PULL_OFFSET_MOVED, 0, 0, 0),
    }
    for (queue_id, offset), want in expected.items():
        response = await handle(table, channel, pull_request(offset, queue_id=queue_id))
        header = response.decode_header(PullMessageResponseHeader)
        got = (response.code, header.next_begin_offset, header.min_offset, header.max_offset)
        assert got == want, (queue_id, offset)
        assert bool(response.wire_body) == (want[0] == ResponseCode.SUCCESS)


async def test_a_pull_takes_only_the_subscribed_tags(table: ProcessorTable) -> None:
    channel = FakeChannel()
    for body, tag in ((b"1", "TagA"), (b"2", "TagB"), (b"3", "TagA")):
        assert (await handle(table, channel, send_request(body, tags=tag))).code == ResponseCode.SUCCESS

    response = await handle(table, channel, pull_request(0, expression="TagA"))
    assert response.code == ResponseCode.SUCCESS
    assert [(m.body, m.queue_offset) for m in pulled(response)] == [(b"1", 0), (b"3", 2)]
    assert response.decode_header(PullMessageResponseHeader).next_begin_offset == 3

    response = await handle(table, channel, pull_request(2, expression="TagB"))
    assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY  # NO_MATCHED_MESSAGE: skip what did not match
    assert response.decode_header(PullMessageResponseHeader).next_begin_offset == 3


async def test_a_held_pull_is_answered_by_the_next_send(parts: BrokerParts, table: ProcessorTable) -> None:
    channel = FakeChannel()
    request = pull_request(0, queue_id=1, flags=FLAG_SUBSCRIPTION | FLAG_SUSPEND, suspend_ms=5_000)
    started = time.monotonic()
    pull = asyncio.create_task(handle(table, channel, request))
    for _ in range(200):
        if parts.hold.held_count:
            break
        await asyncio.sleep(0.005)
    assert parts.hold.held_count == 1
    assert not pull.done()

    assert (await handle(table, channel, send_request(b"late", queue_id=1))).code == ResponseCode.SUCCESS
    response = await asyncio.wait_for(pull, 2.0)
    assert time.monotonic() - started < 2.0
    assert response.code == ResponseCode.SUCCESS
    assert [m.body for m in pulled(response)] == [b"late"]
    assert parts.hold.held_count == 0


async def test_a_held_pull_answers_not_found_at_its_deadline(parts: BrokerParts, table: ProcessorTable) -> None:
    request = pull_request(0, flags=FLAG_SUBSCRIPTION | FLAG_SUSPEND, suspend_ms=100)
    started = time.monotonic()
    response = await handle(table, FakeChannel(), request)
    waited = time.monotonic() - started
    assert response.code == ResponseCode.PULL_NOT_FOUND
    assert 0.09 <= waited < 1.0
    assert parts.hold.held_count == 0
