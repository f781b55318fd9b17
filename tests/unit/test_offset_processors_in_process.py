"""The offset requests driven in process: no controller, no sockets, no broker started.

QUERY_CONSUMER_OFFSET and UPDATE_CONSUMER_OFFSET (ConsumerManageProcessor), the commit offset a
PULL_MESSAGE carries, and GET_MAX_OFFSET, GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME and
SEARCH_OFFSET_BY_TIMESTAMP (OffsetAdminProcessor), against a real MessageStore on tmp_path, with
requests built and handled as in tests/unit/processor_parts.py.
"""

from __future__ import annotations

import asyncio

import pytest

from broker.processors.admin_offset import OffsetAdminProcessor
from broker.processors.consumer_manage import ConsumerManageProcessor
from broker.processors.pull import PullMessageProcessor
from broker.processors.send import SendMessageProcessor
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.offset import (
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    TimestampResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rocketspark.protocol.headers.pull import FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION
from rocketspark.remoting.processor import ProcessorTable
from tests.unit.processor_parts import (
    GROUP,
    TOPIC,
    BrokerParts,
    ConsumerManageParts,
    FakeChannel,
    OffsetAdminParts,
    PullParts,
    SendParts,
    handle,
    narrow,
    pull_request,
    pulled,
    registered,
    send_request,
)


@pytest.fixture
def table(parts: BrokerParts) -> ProcessorTable:
    return registered(
        SendMessageProcessor(narrow(SendParts, parts)),
        PullMessageProcessor(narrow(PullParts, parts)),
        ConsumerManageProcessor(narrow(ConsumerManageParts, parts)),
        OffsetAdminProcessor(narrow(OffsetAdminParts, parts)),
    )


def query(queue_id: int, *, group: str = GROUP, set_zero_if_not_found: bool | None = False) -> RemotingCommand:
    header = QueryConsumerOffsetRequestHeader(group, TOPIC, queue_id, set_zero_if_not_found)
    return RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header)


def update(queue_id: int, offset: int) -> RemotingCommand:
    header = UpdateConsumerOffsetRequestHeader(GROUP, TOPIC, queue_id, offset)
    return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header)


def queue_request(code: int, queue_id: int) -> RemotingCommand:
    return RemotingCommand.request(code, QueueRequestHeader(TOPIC, queue_id))


async def test_an_updated_offset_is_queried_back(parts: BrokerParts, table: ProcessorTable) -> None:
    channel = FakeChannel()
    response = await handle(table, channel, update(1, 42))
    assert response.code == ResponseCode.SUCCESS
    assert parts.consumer_offsets.query(GROUP, TOPIC, 1) == 42

    response = await handle(table, channel, query(1))
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert response.decode_header(OffsetResponseHeader).offset == 42

    assert (await handle(table, channel, update(1, 43))).code == ResponseCode.SUCCESS
    assert (await handle(table, channel, query(1))).decode_header(OffsetResponseHeader).offset == 43
    # other queues of the group, and the queue for other groups, have none
    for request in (query(2), query(1, group="other-group")):
        response = await handle(table, channel, request)
        assert response.code == ResponseCode.QUERY_NOT_FOUND
        assert "offset" not in response.ext_fields


async def test_an_offset_not_found(table: ProcessorTable) -> None:
    channel = FakeChannel()
    assert (await handle(table, channel, send_request(b"x", queue_id=0))).code == ResponseCode.SUCCESS

    # setZeroIfNotFound=false: QUERY_NOT_FOUND, whatever the queue holds
    for queue_id in (0, 3):
        response = await handle(table, channel, query(queue_id, set_zero_if_not_found=False))
        assert response.code == ResponseCode.QUERY_NOT_FOUND
        assert response.remark == "Not found, do not set to zero, maybe this group boot first"

    # unset (4.x clients send none): a new group starts at 0 while the queue still holds its first message
    for queue_id in (0, 3):
        response = await handle(table, channel, query(queue_id, set_zero_if_not_found=None))
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert response.decode_header(OffsetResponseHeader).offset == 0


async def test_a_pull_commits_the_offset_it_carries(parts: BrokerParts, table: ProcessorTable) -> None:
    channel = FakeChannel()
    for body in (b"a", b"b", b"c"):
        assert (await handle(table, channel, send_request(body, queue_id=2))).code == ResponseCode.SUCCESS

    # without the commit flag the offset field is ignored
    response = await handle(table, channel, pull_request(2, queue_id=2, commit_offset=2))
    assert response.code == ResponseCode.SUCCESS
    assert (await handle(table, channel, query(2))).code == ResponseCode.QUERY_NOT_FOUND

    flags = FLAG_SUBSCRIPTION | FLAG_COMMIT_OFFSET
    response = await handle(table, channel, pull_request(2, queue_id=2, flags=flags, commit_offset=2))
    assert [m.body for m in pulled(response)] == [b"c"]
    response = await handle(table, channel, query(2))
    assert response.code == ResponseCode.SUCCESS
    assert response.decode_header(OffsetResponseHeader).offset == 2
    assert parts.consumer_offsets.offsets(GROUP, TOPIC) == {2: 2}


async def test_queue_offsets_and_the_search_by_timestamp(table: ProcessorTable) -> None:
    channel = FakeChannel()
    for body in (b"first", b"second", b"third"):
        assert (await handle(table, channel, send_request(body, queue_id=3))).code == ResponseCode.SUCCESS
        await asyncio.sleep(0.01)  # each stored at a later millisecond
    stored = pulled(await handle(table, channel, pull_request(0, queue_id=3)))
    times = [m.store_timestamp for m in stored]
    assert times == sorted(set(times)), "the messages should have distinct store times"

    async def offset(request: RemotingCommand) -> int:
        response = await handle(table, channel, request)
        assert response.code == ResponseCode.SUCCESS, response.remark
        return response.decode_header(OffsetResponseHeader).offset

    assert await offset(queue_request(RequestCode.GET_MAX_OFFSET, 3)) == 3
    assert await offset(queue_request(RequestCode.GET_MIN_OFFSET, 3)) == 0
    assert await offset(queue_request(RequestCode.GET_MAX_OFFSET, 0)) == 0  # a queue never written
    assert await offset(queue_request(RequestCode.GET_MIN_OFFSET, 0)) == 0

    response = await handle(table, channel, queue_request(RequestCode.GET_EARLIEST_MSG_STORETIME, 3))
    assert response.decode_header(TimestampResponseHeader).timestamp == times[0]

    # the first offset stored at or after the time; the max offset when none is
    searches = {0: 0, times[0]: 0, times[1]: 1, times[1] - 1: 1, times[2]: 2, times[2] + 1: 3}
    for timestamp, expected in searches.items():
        request = RemotingCommand.request(
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, SearchOffsetRequestHeader(TOPIC, 3, timestamp)
        )
        assert await offset(request) == expected, timestamp
