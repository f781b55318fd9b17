"""The broker as a subprocess, driven over TCP through the client's RPC layer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pyarrow as pa
import pytest

from rocketspark.client import lookup
from rocketspark.client.api import admin, client_manage, offset
from rocketspark.client.api.common import call
from rocketspark.client.api.pull import PullStatus, pull_message, read_pull
from rocketspark.client.api.route import get_route
from rocketspark.client.api.send import SendStatus, send_arrow, send_message, send_request
from rocketspark.errors import (
    InvalidParameterError,
    MessageIllegalError,
    QueryNotFoundError,
    RequestCodeNotSupportedError,
    ServerSystemError,
    TopicNotExistError,
)
from rocketspark.message.batches.producer import producer_batch
from rocketspark.message.batches.schema import STORED_SCHEMA
from rocketspark.message.ids import decode_offset_msg_id
from rocketspark.message.records.decoding import decode_records
from rocketspark.message.sysflag import TRANSACTION_PREPARED_TYPE
from rocketspark.processes import ServerProcess
from rocketspark.protocol.body.heartbeat import ConsumerData, HeartbeatData, SubscriptionData
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.offset import UpdateConsumerOffsetRequestHeader
from rocketspark.protocol.headers.pull import PullMessageRequestHeader
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.client import RemotingClient
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable
from tests.harness import ServerFactory
from tests.integration.broker_client import (
    BROKER_NAME,
    properties,
    pull,
    pull_all,
    pull_header,
    send,
    send_batch,
    send_header,
)
from tests.integration.raw_frames import RawConnection
from tests.waiting import eventually


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    factory = ServerFactory(tmp_path_factory.mktemp("broker-cluster"))
    try:
        namesrv = factory.namesrv()
        broker = factory.broker(namesrv.address, "--set", "registerNameServerPeriod=1000")
        yield namesrv, broker
    finally:
        factory.stop_all()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    remoting = RemotingClient(request_timeout_s=10)
    try:
        yield remoting
    finally:
        await remoting.close()


async def test_sends_answer_with_every_mandatory_field(cluster, client) -> None:
    _, broker = cluster
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        result = await send(client, broker.address, "Fields", b"payload", code=code, tags="TagA", keys="k1")
        assert result.status is SendStatus.SEND_OK
        host, commit_log_offset = decode_offset_msg_id(result.offset_msg_id)
        assert host == broker.address and commit_log_offset >= 0
    assert result.queue_offset == 1
    header = send_header("Fields", props=properties())
    response = await client.invoke(broker.address, send_request(header, b"x", RequestCode.SEND_MESSAGE_V2))
    assert {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"} <= response.ext_fields.keys()


async def test_batch_send_and_standard_pull(cluster, client) -> None:
    _, broker = cluster
    result = await send_batch(client, broker.address, "Batch", [b"b0", b"b1", b"b2"], queue_id=1)
    assert (result.queue_offset, result.count) == (0, 3)
    assert len(result.offset_msg_id.split(",")) == 3
    messages = await pull_all(client, broker.address, "Batch", 1)
    assert [(m.body, m.queue_offset, m.keys) for m in messages] == [
        (b"b0", 0, "k0"),
        (b"b1", 1, "k1"),
        (b"b2", 2, "k2"),
    ]
    assert all(m.store_host == broker.address for m in messages)


async def test_pull_statuses_carry_all_header_fields(cluster, client) -> None:
    _, broker = cluster
    await send(client, broker.address, "Statuses", b"only", queue_id=0)
    found = await pull(client, broker.address, "Statuses", 0, 0)
    assert (found.status, found.next_begin_offset, found.min_offset, found.max_offset) == (PullStatus.FOUND, 1, 0, 1)
    empty = await pull(client, broker.address, "Statuses", 0, 1)
    assert (empty.status, empty.next_begin_offset, empty.max_offset) == (PullStatus.NO_NEW_MSG, 1, 1)
    moved = await pull(client, broker.address, "Statuses", 0, 5)
    assert (moved.status, moved.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 0)
    unused = await pull(client, broker.address, "Statuses", 3, 0)
    assert unused.status is PullStatus.NO_NEW_MSG


async def test_tag_expressions_filter_on_the_broker(cluster, client) -> None:
    _, broker = cluster
    for i, tag in enumerate(["TagA", "TagB", "TagC", "TagA", None]):
        await send(client, broker.address, "Tags", f"m{i}".encode(), tags=tag)
    matched = await pull_all(client, broker.address, "Tags", 0, expression="TagA || TagC")
    assert [m.body for m in matched] == [b"m0", b"m2", b"m3"]
    nothing = await pull(client, broker.address, "Tags", 0, 0, expression="TagZ")
    assert (nothing.status, nothing.next_begin_offset) == (PullStatus.NO_MATCHED_MSG, 5)


async def held_pulls(client: RemotingClient, broker: ServerProcess) -> int:
    """How many pulls the broker holds now (its runtime info)."""
    return int((await admin.get_runtime_info(client, broker.address))["heldPullRequests"])


async def test_long_polling_answers_soon_after_a_send(cluster, client) -> None:
    _, broker = cluster
    await send(client, broker.address, "LongPoll", b"first")
    # held for a minute: only the arrival of a message can answer it within the wait below
    held = asyncio.ensure_future(pull(client, broker.address, "LongPoll", 0, 1, suspend_ms=60_000, timeout_s=90))
    await eventually(lambda: held_pulls(client, broker), timeout_s=10, what="the pull held")
    assert not held.done()
    await send(client, broker.address, "LongPoll", b"second")
    result = await asyncio.wait_for(held, 30)
    assert result.status is PullStatus.FOUND
    assert [m.body for m in decode_records(result.body)] == [b"second"]


async def test_long_polling_times_out_with_not_found(cluster, client) -> None:
    _, broker = cluster
    await send(client, broker.address, "Deadline", b"x")
    deadline = time.monotonic() + 0.8
    result = await pull(client, broker.address, "Deadline", 0, 1, suspend_ms=800, timeout_s=10)
    assert result.status is PullStatus.NO_NEW_MSG
    assert time.monotonic() >= deadline  # answered once the hold ran out, not at once


async def test_held_pull_ignores_non_matching_tags(cluster, client) -> None:
    _, broker = cluster
    await send(client, broker.address, "HeldTags", b"seed", tags="TagA")
    held = asyncio.ensure_future(
        pull(client, broker.address, "HeldTags", 0, 1, expression="TagA", suspend_ms=10_000, timeout_s=20)
    )
    await eventually(lambda: held_pulls(client, broker), timeout_s=10, what="the pull held")
    await send(client, broker.address, "HeldTags", b"other", tags="TagB")
    # the store wakes held pulls as it makes a message visible, before the send is answered: a pull
    # woken by it would no longer count as held by the time the broker reads the next request
    assert await held_pulls(client, broker) == 1
    await send(client, broker.address, "HeldTags", b"wanted", tags="TagA")
    result = await asyncio.wait_for(held, 5)
    assert [m.body for m in decode_records(result.body)] == [b"wanted"]


async def test_auto_created_topic_is_routable_within_a_second(cluster, client) -> None:
    namesrv, broker = cluster
    with pytest.raises(TopicNotExistError):
        await get_route(client, namesrv.address, "FreshTopic")
    await send(client, broker.address, "FreshTopic", b"x")
    route = await eventually(
        lambda: get_route(client, namesrv.address, "FreshTopic"), timeout_s=1.0, what="a route for the new topic"
    )
    assert route.queue_datas[0].write_queue_nums == 4  # the sender's defaultTopicQueueNums


async def test_bad_input_gets_specific_answers(cluster, client) -> None:
    _, broker = cluster
    with pytest.raises(MessageIllegalError, match="limit"):
        await send(client, broker.address, "Bad", b"x" * (4 * 1024 * 1024 + 1))
    with pytest.raises(MessageIllegalError, match="at most 32,767"):
        await send(client, broker.address, "Bad", b"x", big="p" * 40_000)
    with pytest.raises(MessageIllegalError, match="delay level"):
        await send(client, broker.address, "Bad", b"later", DELAY="soon")
    with pytest.raises(MessageIllegalError, match="timerMaxDelaySec"):
        await send(client, broker.address, "Bad", b"later", TIMER_DELAY_SEC=str(4 * 24 * 3600))
    with pytest.raises(MessageIllegalError, match="TIMER_DELAY_MS property must be a whole number"):
        await send(client, broker.address, "Bad", b"later", TIMER_DELAY_MS="1.5")
    header = send_header("Bad", props=properties(), sys_flag=TRANSACTION_PREPARED_TYPE)
    with pytest.raises(MessageIllegalError, match="TRAN_MSG=true"):
        await send_message(client, broker.address, BROKER_NAME, header, b"tx", msg_id="")
    with pytest.raises(InvalidParameterError, match="characters"):
        await send(client, broker.address, "bad topic!", b"x")
    bad_batch = send_header("Bad", batch=True)
    with pytest.raises(MessageIllegalError, match="malformed batch"):
        await send_message(
            client,
            broker.address,
            BROKER_NAME,
            bad_batch,
            b"\x00\x00\x00\x30garbage",
            msg_id="",
            code=RequestCode.SEND_BATCH_MESSAGE,
        )
    assert await offset.get_max_offset(client, broker.address, "Bad", 0) == 0  # nothing of it stored


async def test_unknown_topic_with_auto_create_off(servers: ServerFactory, client) -> None:
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address, "--set", "autoCreateTopicEnable=false")
    with pytest.raises(TopicNotExistError, match="autoCreateTopicEnable=false"):
        await send(client, broker.address, "Nope", b"x")
    await admin.create_topic(client, broker.address, TopicConfig("Created", 2, 2))
    assert (await send(client, broker.address, "Created", b"x", queue_id=1)).queue_offset == 0


async def test_consumer_offsets(cluster, client) -> None:
    _, broker = cluster
    await send(client, broker.address, "Offsets", b"x", queue_id=0)
    # a new group on a queue whose first message is still there starts at 0 (Apache's answer)...
    assert await offset.query_consumer_offset(client, broker.address, "g1", "Offsets", 0) == 0
    # ...unless it asks the broker to tell "no offset" apart
    assert (
        await offset.query_consumer_offset(client, broker.address, "g1", "Offsets", 0, set_zero_if_not_found=False)
        is None
    )
    await offset.update_consumer_offset(client, broker.address, "g1", "Offsets", 0, 1)  # oneway

    async def committed() -> bool:
        found = await offset.query_consumer_offset(
            client, broker.address, "g1", "Offsets", 0, set_zero_if_not_found=False
        )
        return found == 1

    await eventually(committed, what="the oneway offset update")
    stats = await admin.get_consume_stats(client, broker.address, "g1", "Offsets")
    wrapper = stats.offset_table[MessageQueue("Offsets", BROKER_NAME, 0)]
    assert (wrapper.broker_offset, wrapper.consumer_offset) == (1, 1)


async def test_a_pull_commit_and_a_later_offset_update_read_together_keep_their_order(cluster, client) -> None:
    """A push consumer's last pull carries the offset consumed when it was sent; the update it sends
    at shutdown, right after, is the later. Read in one go, the broker must keep the update."""
    _, broker = cluster
    topic, group = "CommitOrder", "commit_order"
    for i in range(5):
        await send(client, broker.address, topic, f"m{i}".encode(), queue_id=0)
    held = pull_header(topic, 0, 5, group=group, suspend_ms=200, commit_offset=4)
    pull_request = RemotingCommand.request(RequestCode.PULL_MESSAGE, held)
    update = RemotingCommand.request(
        RequestCode.UPDATE_CONSUMER_OFFSET, UpdateConsumerOffsetRequestHeader(group, topic, 0, 5), oneway=True
    )
    async with RawConnection(broker.address) as connection:
        connection.write(pull_request, update)
        (answer,) = await connection.responses([pull_request.opaque])
    assert answer.code == ResponseCode.PULL_NOT_FOUND
    assert await offset.query_consumer_offset(client, broker.address, group, topic, 0) == 5


async def test_queue_offsets_and_search_by_time(cluster, client) -> None:
    _, broker = cluster
    await send(client, broker.address, "Times", b"a")
    await asyncio.sleep(0.05)
    middle = int(time.time() * 1000)
    await asyncio.sleep(0.05)
    await send(client, broker.address, "Times", b"b")
    address = broker.address
    assert await offset.get_min_offset(client, address, "Times", 0) == 0
    assert await offset.get_max_offset(client, address, "Times", 0) == 2
    assert await offset.search_offset(client, address, "Times", 0, middle) == 1
    assert 0 < await offset.earliest_store_time(client, address, "Times", 0) < middle


class Member:
    """A consumer-group member that records NOTIFY_CONSUMER_IDS_CHANGED."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.notified: list[str] = []
        processors = ProcessorTable()
        processors.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._notified)
        self.remoting = RemotingClient(processors)

    def _notified(self, connection: Connection, request: RemotingCommand) -> None:
        self.notified.append(request.ext_fields["consumerGroup"])

    async def heartbeat(self, broker: str, group: str, topic: str) -> None:
        consumer = ConsumerData(group, subscription_data_set=[SubscriptionData(topic)])
        await client_manage.send_heartbeat(
            self.remoting, broker, HeartbeatData(self.client_id, consumer_data_set=[consumer])
        )


async def test_heartbeat_membership_and_notification(cluster, client) -> None:
    _, broker = cluster
    first, second = Member("10.0.0.1@1"), Member("10.0.0.2@2")
    try:
        await first.heartbeat(broker.address, "members", "Members")
        assert await client_manage.get_consumer_list(client, broker.address, "members") == ["10.0.0.1@1"]
        await first.heartbeat(broker.address, "members", "Members")  # a repeated heartbeat changes nothing
        # the broker notifies while it handles a heartbeat, so a notification travels ahead of the
        # heartbeat's answer on the member's one connection: it has been handled by now
        joined_alone = len(first.notified)
        await second.heartbeat(broker.address, "members", "Members")
        assert await client_manage.get_consumer_list(client, broker.address, "members") == ["10.0.0.1@1", "10.0.0.2@2"]
        await eventually(lambda: len(first.notified) > joined_alone, what="NOTIFY_CONSUMER_IDS_CHANGED")
        assert joined_alone == 1  # as in Java, the group is told when a member joins, itself included
        assert first.notified == ["members", "members"]
        # a clustering group gets its retry topic, as in Apache RocketMQ
        config = await admin.get_all_topic_config(client, broker.address)
        assert "%RETRY%members" in config.topic_config_table
        await client_manage.unregister_client(second.remoting, broker.address, "10.0.0.2@2", consumer_group="members")
        assert await client_manage.get_consumer_list(client, broker.address, "members") == ["10.0.0.1@1"]
        await first.remoting.close()  # a closed connection leaves the group

        async def group_gone() -> bool:
            try:
                await client_manage.get_consumer_list(client, broker.address, "members")
            except ServerSystemError as exc:
                return "no consumer for this group" in str(exc)
            return False

        await eventually(group_gone, what="the group to forget its closed member")
    finally:
        await first.remoting.close()
        await second.remoting.close()


async def test_pull_uses_the_heartbeat_subscription(cluster, client) -> None:
    _, broker = cluster
    member = Member("10.0.0.3@3")
    try:
        await send(client, broker.address, "HbSub", b"x")
        header = PullMessageRequestHeader("hbgroup", "HbSub", 0, 0, 32, 0, 0, 0, 0)
        with pytest.raises(Exception, match="SUBSCRIPTION_NOT_EXIST"):
            await pull_message(client, broker.address, header)
        await member.heartbeat(broker.address, "hbgroup", "HbSub")
        result = await pull_message(client, broker.address, header)
        assert result.status is PullStatus.FOUND
    finally:
        await member.remoting.close()


async def test_orderly_locks(cluster, client) -> None:
    _, broker = cluster
    queues = [MessageQueue("Locks", BROKER_NAME, i) for i in range(3)]
    got = await client_manage.lock_batch(client, broker.address, "lockers", "c1", queues)
    assert sorted(got) == queues
    assert await client_manage.lock_batch(client, broker.address, "lockers", "c2", queues) == []
    await client_manage.unlock_batch(client, broker.address, "lockers", "c1", queues[:1])
    assert await client_manage.lock_batch(client, broker.address, "lockers", "c2", queues) == queues[:1]


async def test_query_and_view_message(cluster, client) -> None:
    _, broker = cluster
    result = await send(client, broker.address, "Lookup", b"find me", keys="order-42 cust-7", UNIQ_KEY="UNIQ-42")
    by_key = decode_records(await admin.query_message(client, broker.address, "Lookup", "cust-7"))
    assert [m.body for m in by_key] == [b"find me"]
    by_uniq = decode_records(await admin.query_message(client, broker.address, "Lookup", "UNIQ-42", unique_key=True))
    assert by_uniq[0].msg_id == "UNIQ-42"
    with pytest.raises(QueryNotFoundError):
        await admin.query_message(client, broker.address, "Lookup", "absent")
    _, commit_log_offset = decode_offset_msg_id(result.offset_msg_id)
    viewed = decode_records(await admin.view_message(client, broker.address, commit_log_offset))
    assert viewed[0].body == b"find me" and viewed[0].offset_msg_id == result.offset_msg_id

    # the client's lookup (rocketspark message show's and the dashboard's): decoded, named by broker
    (found,) = await lookup.by_key_on_broker(client, BROKER_NAME, broker.address, "Lookup", "order-42", max_num=4)
    assert found.body == b"find me" and found.broker_name == BROKER_NAME
    by_producer_id = await lookup.by_key_on_broker(
        client, BROKER_NAME, broker.address, "Lookup", "UNIQ-42", max_num=4, unique=True
    )
    assert [m.msg_id for m in by_producer_id] == ["UNIQ-42"]
    assert await lookup.by_key_on_broker(client, BROKER_NAME, broker.address, "Lookup", "absent", max_num=4) == []
    masters = {BROKER_NAME: broker.address}
    (viewed_again,) = await lookup.by_offset_msg_id(client, masters, result.offset_msg_id.lower())
    assert viewed_again.body == b"find me" and viewed_again.broker_name == BROKER_NAME
    assert await lookup.by_offset_msg_id(client, {"other": "127.0.0.1:9"}, result.offset_msg_id) == []
    assert await lookup.by_offset_msg_id(client, masters, "not an id") == []
    # a reading pull: every tag, nothing committed, never held
    read = await read_pull(client, broker.address, "lookers", "Lookup", found.queue_id, found.queue_offset, 1)
    assert read.status is PullStatus.FOUND and decode_records(read.body)[0].body == b"find me"
    assert ("Lookup", "lookers") not in await admin.get_all_consumer_offsets(client, broker.address)


async def test_topic_admin_and_stats(cluster, client) -> None:
    _, broker = cluster
    await admin.create_topic(client, broker.address, TopicConfig("Admin", 3, 3))
    await send(client, broker.address, "Admin", b"x", queue_id=2)
    stats = await admin.get_topic_stats(client, broker.address, "Admin")
    assert {mq.queue_id: t.max_offset for mq, t in stats.offset_table.items()} == {0: 0, 1: 0, 2: 1}
    with pytest.raises(InvalidParameterError, match="reserved"):
        await admin.create_topic(client, broker.address, TopicConfig("TBW102", 1, 1))
    await admin.delete_topic_in_broker(client, broker.address, "Admin")
    assert "Admin" not in (await admin.get_all_topic_config(client, broker.address)).topic_config_table
    with pytest.raises(TopicNotExistError):
        await admin.get_topic_stats(client, broker.address, "Admin")


async def test_arrow_send_and_pull_are_counted(cluster, client) -> None:
    _, broker = cluster
    batch = producer_batch(pa.table({"body": [f"a{i}".encode() for i in range(500)], "keys": ["k"] * 500}))
    header = send_header("ArrowTopic", queue_id=0)
    result = await send_arrow(client, broker.address, BROKER_NAME, header, batch, first_msg_id="")
    assert (result.queue_offset, result.count) == (0, 500)
    pulled = await pull(client, broker.address, "ArrowTopic", 0, 0, max_nums=10_000, arrow=True)
    table = pa.ipc.open_stream(pulled.body).read_all()
    assert table.schema.equals(STORED_SCHEMA)
    assert table.column("body").to_pylist() == [f"a{i}".encode() for i in range(500)]
    assert pulled.next_begin_offset == 500
    standard = await pull_all(client, broker.address, "ArrowTopic", 0)
    assert len(standard) == 500 and standard[0].keys == "k"
    info = await admin.get_runtime_info(client, broker.address)
    assert int(info["arrowSendMessages"]) >= 500 and int(info["arrowPullMessages"]) >= 500
    assert int(info["standardPullMessages"]) >= 500
    # Arrow allocates through the C library (broker.memory): its buffers are among the heap's blocks
    arrow, in_use, mapped = (int(info[k]) for k in ("memoryArrowBytes", "memoryHeapInUseBytes", "memoryMappedBytes"))
    assert 0 < arrow <= in_use + mapped, info
    assert int(info["memoryHeapFreeBytes"]) >= 0 and int(info["memoryPythonBlocks"]) > 0


async def test_arrow_codes_can_be_turned_off(servers: ServerFactory, client) -> None:
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address, "--set", "arrowEnable=false")
    batch = producer_batch(pa.table({"body": [b"x"]}))
    with pytest.raises(RequestCodeNotSupportedError):
        await send_arrow(client, broker.address, BROKER_NAME, send_header("NoArrow"), batch, first_msg_id="")
    await send(client, broker.address, "NoArrow", b"x")
    with pytest.raises(RequestCodeNotSupportedError):
        await pull(client, broker.address, "NoArrow", 0, 0, arrow=True)


async def test_malformed_arrow_batch_stores_nothing(cluster, client) -> None:
    _, broker = cluster
    request = RemotingCommand.request(ExtensionCode.ARROW_SEND_MESSAGE, send_header("ArrowBad"), b"not arrow at all")
    with pytest.raises(MessageIllegalError, match="Arrow IPC"):
        await call(client, broker.address, request)
    assert await offset.get_max_offset(client, broker.address, "ArrowBad", 0) == 0


async def test_arrow_pull_answers_fit_in_a_frame(cluster, client) -> None:
    """Rows much larger than their bodies (big properties) still come back within 16 MiB frames."""
    _, broker = cluster
    rows = 20_000
    table = pa.table(
        {
            "body": [b"b"] * rows,
            "properties": pa.array([[("padding", "p" * 1000)]] * rows, pa.map_(pa.string(), pa.string())),
        }
    )
    header = send_header("WideRows", queue_id=0)
    for start in range(0, rows, 5_000):
        chunk = producer_batch(table.slice(start, 5_000))
        await send_arrow(client, broker.address, BROKER_NAME, header, chunk, first_msg_id="")
    received, offset_now = 0, 0
    while received < rows:
        pulled = await pull(client, broker.address, "WideRows", 0, offset_now, max_nums=100_000, arrow=True)
        assert pulled.status is PullStatus.FOUND
        assert len(pulled.body) < 16 * 1024 * 1024
        received += pa.ipc.open_stream(pulled.body).read_all().num_rows
        offset_now = pulled.next_begin_offset
    assert received == rows
