"""A bounded flood of unsigned and malformed traffic against a broker, run as its own process by
tests/security/test_hostile_peer.py: `python -m tests.security.hostile_flood HOST:PORT SECONDS`.

For SECONDS (and at most the counts below) it sends, side by side: unsigned sends pipelined on a few
connections, sends signed with a wrong secret, an AccessKey holding a newline, unsigned heartbeats of
about 2.5 MB, malformed frames each on a new connection, a connection that writes requests and never
reads an answer, and sockets that connect and say nothing. The last stdout line is `RESULT <json>`
with what was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import sys
import time
from collections.abc import Callable

from rocketspark.protocol.body.heartbeat import ConsumerData, HeartbeatData, SubscriptionData
from rocketspark.protocol.codec import encode
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.send import SendMessageRequestHeader, encode_send_header
from rocketspark.remoting.signing import SessionCredentials, sign

UNSIGNED_REQUESTS = 6_000
PIPELINES = 3
WRONG_SECRET_REQUESTS = 600
HEARTBEATS = 3
MALFORMED_CONNECTIONS = 200
SILENT_SOCKETS = 64
NEVER_READ_BYTES = 32 * 1024 * 1024

counts: dict[str, int] = {}


def count(kind: str, n: int = 1) -> None:
    counts[kind] = counts.get(kind, 0) + n


def send_request(opaque: int, topic: str = "FloodTopic") -> RemotingCommand:
    header = SendMessageRequestHeader("flood", topic, "TBW102", 4, 0, 0, int(time.time() * 1000), 0)
    code = RequestCode.SEND_MESSAGE_V2
    return RemotingCommand(code=code, opaque=opaque, ext_fields=encode_send_header(header, code), body=b"x" * 100)


async def pipelined(
    host: str, port: int, requests: int, deadline: float, make: Callable[[int], RemotingCommand]
) -> None:
    """Batches of 50 requests spread over the time left, each batch's answers read before the next."""
    reader, writer = await asyncio.open_connection(host, port)
    pause = (deadline - time.monotonic()) / max(1, requests // 50)
    frames = [encode(make(i)) for i in range(50)]  # encoded once: the flood's own CPU stays small
    sent = 0
    try:
        while sent < requests and time.monotonic() < deadline:
            writer.write(b"".join(frames))
            await writer.drain()
            sent += len(frames)
            await read_answers(reader, len(frames))
            await asyncio.sleep(pause)
    finally:
        count("answered requests", sent)
        writer.close()


async def read_answers(reader: asyncio.StreamReader, n: int) -> None:
    for _ in range(n):
        (length,) = struct.unpack(">i", await reader.readexactly(4))
        await reader.readexactly(length)


def wrong_secret(opaque: int) -> RemotingCommand:
    request = send_request(opaque)
    sign(request, SessionCredentials("rocketspark_user", "not-the-secret"))
    return request


def forged_key(opaque: int) -> RemotingCommand:
    request = send_request(opaque)
    request.ext_fields["AccessKey"] = "evil\nFORGED INFO broker.acl: admin accepted"
    return request


async def heartbeats(host: str, port: int) -> None:
    one = ConsumerData("flood_group", subscription_data_set=[SubscriptionData("FloodTopic")]).to_json()
    consumers = b",".join(one.replace(b"flood_group", b"flood_group_%d" % i) for i in range(8_000))
    body = (
        HeartbeatData("flood@1").to_json().replace(b'"consumerDataSet":[]', b'"consumerDataSet":[' + consumers + b"]")
    )
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for opaque in range(HEARTBEATS):
            writer.write(encode(RemotingCommand(code=RequestCode.HEART_BEAT, opaque=opaque, body=body)))
            await writer.drain()
            await read_answers(reader, 1)
            count("heartbeat bytes", len(body))
    finally:
        writer.close()


async def malformed(host: str, port: int, deadline: float) -> None:
    garbage = struct.pack(">ii", 12, 8) + b"not json"
    for _ in range(MALFORMED_CONNECTIONS):
        if time.monotonic() > deadline:
            break
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection(host, port)
            writer.write(garbage)
            await writer.drain()
            writer.close()
            count("malformed frames")
        await asyncio.sleep(0.005)


async def never_reads(host: str, port: int, deadline: float) -> None:
    _, writer = await asyncio.open_connection(host, port)
    frames = b"".join(encode(send_request(i)) for i in range(200))
    written = 0
    try:
        while written < NEVER_READ_BYTES and time.monotonic() < deadline:
            writer.write(frames)
            written += len(frames)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.01, deadline - time.monotonic())):
                    await writer.drain()
    finally:
        count("never-read bytes written", written)
        writer.transport.abort()


async def silent(host: str, port: int, deadline: float) -> None:
    sockets = []
    for _ in range(SILENT_SOCKETS):
        with contextlib.suppress(OSError):
            sockets.append(socket.create_connection((host, port)))
    count("silent sockets", len(sockets))
    await asyncio.sleep(max(0.0, deadline - time.monotonic()))
    for sock in sockets:
        sock.close()


async def flood(address: str, seconds: float) -> None:
    host, port_text = address.rsplit(":", 1)
    port = int(port_text)
    deadline = time.monotonic() + seconds
    per_pipeline = UNSIGNED_REQUESTS // PIPELINES
    await asyncio.gather(
        *(pipelined(host, port, per_pipeline, deadline, send_request) for _ in range(PIPELINES)),
        pipelined(host, port, WRONG_SECRET_REQUESTS, deadline, wrong_secret),
        pipelined(host, port, 100, deadline, forged_key),
        heartbeats(host, port),
        malformed(host, port, deadline),
        never_reads(host, port, deadline),
        silent(host, port, deadline),
    )


if __name__ == "__main__":
    print("READY", flush=True)  # imported: the flood starts now
    asyncio.run(flood(sys.argv[1], float(sys.argv[2])))
    print("RESULT " + json.dumps(counts), flush=True)
