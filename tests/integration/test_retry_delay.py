"""Delayed messages (SCHEDULE_TOPIC_XXXX), CONSUMER_SEND_MSG_BACK and the %RETRY% / %DLQ% topics.

The broker runs with messageDelayLevel shortened to seconds, so no test sleeps for long.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from rocketspark.client.api.route import get_route
from rocketspark.client.api.send import send_back, send_message
from rocketspark.errors import MessageIllegalError
from rocketspark.message.message import MessageExt
from rocketspark.message.properties import codec as props
from rocketspark.message.records.batch_body import BatchColumns, encode_batch_body
from rocketspark.processes import ServerProcess
from rocketspark.protocol.body.topic import DEFAULT_PERM
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.headers.send import ConsumerSendMsgBackRequestHeader
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import BROKER_NAME, properties, pull_all, send, send_batch, send_header
from tests.waiting import eventually

#: one level of 1 s: every higher level (a send-back's 3 + reconsumeTimes) counts as it. The
#: duplicate window is on: internal topics must stay out of it.
SETTINGS = ("--set", "messageDelayLevel=1s", "--set", "duplicateWindowSeconds=600")
GROUP = "retry_group"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    factory = ServerFactory(tmp_path_factory.mktemp("retry-cluster"))
    try:
        namesrv = factory.namesrv()
        yield namesrv, factory.broker(namesrv.address, *SETTINGS)
    finally:
        factory.stop_all()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    remoting = RemotingClient(request_timeout_s=10)
    yield remoting
    await remoting.close()


async def visible(client: RemotingClient, broker: str, topic: str, queue_id: int = 0) -> list[MessageExt]:
    return await pull_all(client, broker, topic, queue_id)


async def test_delayed_message_is_hidden_until_its_level_has_passed(cluster, client) -> None:
    _, broker = cluster
    sent_at = time.monotonic()
    result = await send(client, broker.address, "Later", b"later", queue_id=1, DELAY="1", UNIQ_KEY="D-1")
    assert result.message_queue.queue_id == 1  # answered with the queue it was sent to
    assert await visible(client, broker.address, "Later", 1) == []
    [message] = await eventually(lambda: visible(client, broker.address, "Later", 1), timeout_s=5, what="delivery")
    assert time.monotonic() - sent_at >= 0.9
    assert message.body == b"later" and message.queue_id == 1
    assert message.properties[props.REAL_TOPIC] == "Later" and props.DELAY_TIME_LEVEL not in message.properties
    assert message.properties[props.UNIQ_KEY] == "D-1"


async def test_batches_may_not_hold_delayed_messages(cluster, client) -> None:
    _, broker = cluster
    await send_batch(client, broker.address, "LaterBatch", [b"a", b"b"])  # no delay: fine
    body = encode_batch_body(BatchColumns.of([(0, b"a", properties(DELAY="1"))]))
    with pytest.raises(MessageIllegalError, match="delayed"):
        await send_message(
            client,
            broker.address,
            BROKER_NAME,
            send_header("LaterBatch", batch=True),
            body,
            msg_id="",
            code=RequestCode.SEND_BATCH_MESSAGE,
        )


def _back_header(
    message: MessageExt, *, group: str = GROUP, max_times: int | None = None, level: int = 0
) -> ConsumerSendMsgBackRequestHeader:
    return ConsumerSendMsgBackRequestHeader(
        offset=message.commit_log_offset,
        group=group,
        delay_level=level,
        origin_msg_id=message.msg_id,
        origin_topic=message.topic,
        max_reconsume_times=max_times,
    )


async def send_back_and_wait(client: RemotingClient, broker: str, message: MessageExt, seen: int) -> list[MessageExt]:
    """Send `message` back (at most 2 reconsumes) and wait for retry number `seen` + 1."""
    await send_back(client, broker, _back_header(message, max_times=2))
    return await eventually(
        lambda: _more_than(client, broker, f"%RETRY%{GROUP}", seen), timeout_s=5, what=f"retry number {seen + 1}"
    )


async def _more_than(client: RemotingClient, broker: str, topic: str, seen: int) -> list[MessageExt] | None:
    messages = await visible(client, broker, topic)
    return messages if len(messages) > seen else None


async def test_send_back_retries_with_growing_reconsume_times_then_dead_letters(cluster, client) -> None:
    namesrv, broker = cluster
    await send(client, broker.address, "Failing", b"payload", UNIQ_KEY="F-1")
    [original] = await visible(client, broker.address, "Failing")
    retries = await send_back_and_wait(client, broker.address, original, 0)
    first = retries[0]
    assert (first.body, first.reconsume_times, first.topic) == (b"payload", 1, f"%RETRY%{GROUP}")
    assert first.properties[props.RETRY_TOPIC] == "Failing"
    assert first.properties[props.ORIGIN_MESSAGE_ID] == original.offset_msg_id
    assert first.properties[props.RECONSUME_TIME] == "1"
    assert first.properties[props.UNIQ_KEY] == "F-1"
    retries = await send_back_and_wait(client, broker.address, first, 1)
    second = retries[1]
    assert second.reconsume_times == 2 and second.properties[props.RETRY_TOPIC] == "Failing"
    assert second.properties[props.ORIGIN_MESSAGE_ID] == original.offset_msg_id
    # the limit is reached: straight to the dead-letter topic, without a delay
    await send_back(client, broker.address, _back_header(second, max_times=2))
    [dead] = await visible(client, broker.address, f"%DLQ%{GROUP}")
    assert (dead.body, dead.reconsume_times) == (b"payload", 3)
    assert props.DELAY_TIME_LEVEL not in dead.properties
    for topic in (f"%RETRY%{GROUP}", f"%DLQ%{GROUP}"):  # readable and writable, and routable
        route = await eventually(lambda t=topic: get_route(client, namesrv.address, t), what=f"a route for {topic}")
        assert route.queue_datas[0].perm == DEFAULT_PERM == 6


async def test_negative_level_and_group_limit_send_to_the_dead_letter_topic(cluster, client) -> None:
    _, broker = cluster
    group = "dlq_group"
    await send(client, broker.address, "Doomed", b"doomed")
    await send(client, broker.address, "Doomed", b"spent")
    doomed, spent = await visible(client, broker.address, "Doomed")
    await send_back(client, broker.address, _back_header(doomed, group=group, level=-1))
    # no maxReconsumeTimes in the request: the group's retryMaxTimes (16) decides
    await send_back(client, broker.address, _back_header(spent, group=group))
    assert [m.body for m in await visible(client, broker.address, f"%DLQ%{group}")] == [b"doomed"]
    retried = await eventually(lambda: visible(client, broker.address, f"%RETRY%{group}"), timeout_s=6, what="retry")
    assert [m.body for m in retried] == [b"spent"]


async def test_message_sent_back_twice_is_stored_twice_under_the_duplicate_window(cluster, client) -> None:
    _, broker = cluster
    group = "twice_group"
    await send(client, broker.address, "Twice", b"twice", UNIQ_KEY="T-1")
    [message] = await visible(client, broker.address, "Twice")
    for _ in range(2):  # reconsumeTimes 0 < 1: retried
        await send_back(client, broker.address, _back_header(message, group=group, max_times=1))
    retried = await eventually(
        lambda: _more_than(client, broker.address, f"%RETRY%{group}", 1), timeout_s=6, what="both retries"
    )
    assert [m.properties[props.UNIQ_KEY] for m in retried] == ["T-1", "T-1"]


async def test_client_send_to_the_retry_topic_follows_the_same_rules(cluster, client) -> None:
    """A consumer whose send-back failed sends the message to %RETRY%<group> itself (as Java does)."""
    _, broker = cluster
    group = "fallback_group"

    async def send_retry(body: bytes, reconsume_times: int) -> None:
        header = send_header(f"%RETRY%{group}", props=properties(DELAY="1", RETRY_TOPIC="Orig"))
        header.reconsume_times, header.max_reconsume_times = reconsume_times, 3
        await send_message(client, broker.address, BROKER_NAME, header, body, msg_id="")

    await send_retry(b"again", 2)
    await send_retry(b"dead", 3)
    [dead] = await visible(client, broker.address, f"%DLQ%{group}")
    assert (dead.body, dead.reconsume_times) == (b"dead", 3)
    assert await visible(client, broker.address, f"%RETRY%{group}") == []  # delayed by level 1
    [again] = await eventually(lambda: visible(client, broker.address, f"%RETRY%{group}"), what="the delayed retry")
    assert (again.body, again.reconsume_times) == (b"again", 2)


async def test_a_client_never_sets_the_schedule_services_mark(cluster, client) -> None:
    """SCHEDULE_ORIGIN tells the schedule service at start-up which deliveries are stored: a client's
    copy (a consumed delivery sent on) would make it skip a delayed message that was never delivered."""
    _, broker = cluster
    forged = {props.SCHEDULE_ORIGIN: "1:0"}
    await send(client, broker.address, "Forwarded", b"single", queue_id=0, **forged)
    body = encode_batch_body(BatchColumns.of([(0, b"batched", properties(**forged))]))
    header = send_header("Forwarded", queue_id=1, batch=True)
    await send_message(
        client, broker.address, BROKER_NAME, header, body, msg_id="", code=RequestCode.SEND_BATCH_MESSAGE
    )
    stored = [
        *await visible(client, broker.address, "Forwarded", 0),
        *await visible(client, broker.address, "Forwarded", 1),
    ]
    assert [m.body for m in stored] == [b"single", b"batched"]
    assert all(props.SCHEDULE_ORIGIN not in m.properties for m in stored)


@pytest.mark.slow
async def test_delivery_progress_and_pending_messages_survive_a_restart(
    servers: ServerFactory, tmp_path: Path, client: RemotingClient
) -> None:
    namesrv = servers.namesrv()
    data_dir = tmp_path / "broker"
    settings = ("--set", "messageDelayLevel=1s 4s")
    broker = servers.broker(namesrv.address, *settings, data_dir=data_dir)
    await send(client, broker.address, "Restart", b"early", DELAY="1")
    await eventually(lambda: visible(client, broker.address, "Restart"), what="the early message")
    sent_at = time.monotonic()
    await send(client, broker.address, "Restart", b"late", DELAY="2")
    assert broker.stop() == 0
    restarted = servers.broker(namesrv.address, *settings, data_dir=data_dir)
    if time.monotonic() - sent_at < 3.5:
        assert [m.body for m in await visible(client, restarted.address, "Restart")] == [b"early"]
    messages = await eventually(
        lambda: _more_than(client, restarted.address, "Restart", 1), timeout_s=8, what="the late message"
    )
    assert time.monotonic() - sent_at >= 3.9
    # the early message was delivered once: its delivery was persisted before the restart
    assert [m.body for m in messages] == [b"early", b"late"]
