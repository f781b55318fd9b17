"""What a peer that signs nothing can do to the broker (issue 41, item 4): nothing of its body reaches
a remark or the log, its refusals are logged rate-limited and escaped, and a connection whose peer does
not read its answers stops being read."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from rocketspark.protocol.body.heartbeat import ConsumerData, HeartbeatData, SubscriptionData
from rocketspark.protocol.codec import FrameDecoder, encode
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.server import MAX_UNSENT_BYTES, RemotingServer
from rocketspark.remoting.throttled_log import ThrottledLog, escaped
from tests.integration.raw_frames import RawConnection
from tests.security.conftest import AclBroker
from tests.security.test_acl_raw_frames import TOPIC, send_request
from tests.waiting import eventually

SECRET_GROUP = "group_nobody_should_see"
SECRET_TOPIC = "TopicNobodyShouldSee"


def heartbeat() -> RemotingCommand:
    consumers = [
        ConsumerData(f"{SECRET_GROUP}{i}", subscription_data_set=[SubscriptionData(SECRET_TOPIC)]) for i in range(50)
    ]
    body = HeartbeatData("10.0.0.1@evil", consumer_data_set=consumers).to_json()
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=body)


async def test_nothing_of_an_unsigned_body_reaches_the_remark_or_the_log(acl_broker: AclBroker) -> None:
    async with RawConnection(acl_broker.broker.address) as connection:
        refused = await connection.invoke(heartbeat())
        assert refused.code == ResponseCode.NO_PERMISSION
        assert refused.remark == "No permission: HEART_BEAT(34) carries no AccessKey; this broker needs signed requests"
        forged = send_request(TOPIC, b"x")
        forged.ext_fields["AccessKey"] = "evil\nFORGED INFO broker: admin logged in"
        unknown = await connection.invoke(forged)
        assert unknown.code == ResponseCode.NO_PERMISSION
        assert "evil\\nFORGED" in (unknown.remark or "")
    log = acl_broker.broker.log_path.read_text()
    assert SECRET_GROUP not in log and SECRET_TOPIC not in log
    assert not any(line.startswith("FORGED") for line in log.splitlines())
    assert "FORGED INFO broker: admin logged in has no account" in log  # escaped, inside the refusal's line


async def test_a_flood_of_refusals_is_logged_a_line_per_kind_and_interval(acl_broker: AclBroker) -> None:
    before = acl_broker.broker.log_path.read_text().count("refused")
    async with RawConnection(acl_broker.broker.address) as connection:
        for _ in range(300):
            refused = await connection.invoke(send_request(TOPIC, b"unsigned"))
            assert refused.code == ResponseCode.NO_PERMISSION
    assert acl_broker.broker.log_path.read_text().count("refused") - before <= 1


def test_the_throttled_log_counts_what_it_left_out(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    throttled = ThrottledLog(logging.getLogger("throttled-test"), interval_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, "throttled-test"):
        for second in (0, 1, 2, 3, 11, 12):
            now[0] = second
            throttled.log("refusals", "from %s", f"peer{second}\nforged")
        throttled.log("other", "other kind %s", "x")
    assert caplog.messages == [
        "from peer0\\nforged",
        "from peer11\\nforged (3 more refusals not logged since the last such line)",
        "other kind x",
    ]
    assert escaped("a" * 300) == "a" * 200 + "...(100 more)"


async def test_a_peer_that_does_not_read_its_answers_is_not_read_from() -> None:
    answer = b"z" * 64 * 1024
    processors = ProcessorTable()
    processors.register(RequestCode.GET_BROKER_CLUSTER_INFO, lambda _, request: request.response(body=answer))
    server = RemotingServer(processors)
    await server.start()
    requests = 200  # 12.5 MiB of answers
    sock = socket.socket()
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.connect(("127.0.0.1", server.port))
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        frames = b"".join(
            encode(RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO, opaque=i)) for i in range(requests)
        )
        sending = loop.create_task(loop.sock_sendall(sock, frames))  # blocks once the server stops reading
        await eventually(lambda: len(server.connections) == 1, what="the connection")
        (connection,) = server.connections
        await eventually(lambda: not connection.reading, what="reading paused")
        transport = connection._transport
        assert transport is not None
        await asyncio.sleep(0.3)
        assert transport.get_write_buffer_size() <= MAX_UNSENT_BYTES + len(answer) + 1024
        # once the peer reads, the connection is read again and every request is answered
        decoder, answered = FrameDecoder(), 0
        async with asyncio.timeout(30):
            while answered < requests:
                chunk = await loop.sock_recv(sock, 1 << 20)
                assert chunk
                answered += sum(1 for _ in decoder.feed(chunk))
        await sending
        assert connection.reading
    finally:
        sock.close()
        await server.stop()
