"""One bad send must not fail the sends that share its group-commit round.

The bad requests go out as raw frames, so no client-side check stands between them and the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pyarrow as pa
import pytest

from rocketspark.message.batches.schema import PRODUCER_SCHEMA
from rocketspark.message.properties.codec import encode_properties
from rocketspark.processes import ServerProcess
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import properties, pull_all, send_header
from tests.integration.raw_frames import RawConnection, arrow_send_request, producer_rows

SENDERS = 60
ROUNDS = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    factory = ServerFactory(tmp_path_factory.mktemp("send-isolation"))
    try:
        namesrv = factory.namesrv()
        # on a loaded machine a round may take longer than the default 200 ms a send may wait for
        # one; SYSTEM_BUSY is not what these tests are about (tests/integration/test_backpressure.py)
        yield factory.broker(namesrv.address, "--set", "waitTimeMillsInSendQueue=10000")
    finally:
        factory.stop_all()


@pytest.fixture
async def connections(broker: ServerProcess) -> AsyncIterator[list[RawConnection]]:
    opened = [RawConnection(broker.address) for _ in range(4)]
    for connection in opened:
        await connection.__aenter__()
    try:
        yield opened
    finally:
        for connection in opened:
            await connection.__aexit__(None, None, None)


def standard_send(topic: str, i: int) -> RemotingCommand:
    header = send_header(topic, props=properties(keys=f"good-{i}"))
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, f"innocent {i}".encode())


async def sends_beside(connections: list[RawConnection], topic: str, bad: RemotingCommand) -> RemotingCommand:
    """Write the bad request amid SENDERS standard sends, all at once; the bad one's answer.

    Asserts that every standard send succeeded.
    """
    requests = [standard_send(topic, i) for i in range(SENDERS)]
    requests.insert(SENDERS // 2, bad)
    for n, request in enumerate(requests):
        connections[n % len(connections)].write(request)
    per_connection = await asyncio.gather(
        *(c.responses([r.opaque for r in requests[n :: len(connections)]]) for n, c in enumerate(connections))
    )
    by_opaque = {a.opaque: a for answers in per_connection for a in answers}
    answers = [by_opaque[r.opaque] for r in requests]
    bad_answer = answers.pop(SENDERS // 2)
    innocent_failures = [(a.code, a.remark) for a in answers if a.code != ResponseCode.SUCCESS]
    assert innocent_failures == [], f"{len(innocent_failures)} of {SENDERS} innocent sends failed"
    return bad_answer


async def test_an_arrow_row_with_40_kb_of_keys_fails_alone(
    broker: ServerProcess, connections: list[RawConnection]
) -> None:
    topic = "IsolationKeys"
    for _ in range(ROUNDS):
        bad = arrow_send_request(send_header(topic), producer_rows([b"bad"], keys=["k" * 40_000]))
        answer = await sends_beside(connections, topic, bad)
        assert answer.code == ResponseCode.MESSAGE_ILLEGAL
        assert "properties" in (answer.remark or "") and "32,767" in (answer.remark or "")
    stored = await pull_all_raw(broker, topic)
    assert len(stored) == SENDERS * ROUNDS
    assert all(body.startswith(b"innocent") for body in stored)


@pytest.mark.parametrize(
    ("user_properties", "reason"),
    [({"DELAY": "3"}, "system keys"), ({"KEYS": "x"}, "system keys"), ({"a": "v" * 40_000}, "32,767")],
)
async def test_arrow_rows_with_illegal_properties_are_refused(
    connections: list[RawConnection], user_properties: dict[str, str], reason: str
) -> None:
    topic = "IsolationProps"
    columns = producer_rows([b"bad"]).columns[:4]
    properties_type = PRODUCER_SCHEMA.field("properties").type
    batch = pa.record_batch([*columns, pa.array([list(user_properties.items())], properties_type)], PRODUCER_SCHEMA)
    answer = await sends_beside(connections, topic, arrow_send_request(send_header(topic), batch))
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL
    assert reason in (answer.remark or "")


async def test_standard_send_with_bad_delay_or_huge_properties_fails_alone(connections: list[RawConnection]) -> None:
    topic = "IsolationStandard"
    delayed = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, send_header(topic, props=encode_properties({"DELAY": "soon"})), b"later"
    )
    answer = await sends_beside(connections, topic, delayed)
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "DELAY" in (answer.remark or "")
    huge = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, send_header(topic, props=properties(keys="k" * 40_000)), b"huge"
    )
    answer = await sends_beside(connections, topic, huge)
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "32,767" in (answer.remark or "")


async def pull_all_raw(broker: ServerProcess, topic: str) -> list[bytes]:
    client = RemotingClient(request_timeout_s=10)
    try:
        bodies: list[bytes] = []
        for queue_id in range(4):
            bodies.extend(m.body for m in await pull_all(client, broker.address, topic, queue_id))
        return bodies
    finally:
        await client.close()
