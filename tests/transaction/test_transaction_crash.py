"""A broker killed with SIGKILL between a half message and its end still resolves it after the
restart (the check asks the producer again), and a half message committed before the kill is not
stored again by an end that arrives after it. The duplicate window is off."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rocketspark.client.api import admin
from rocketspark.client.api.offset import get_max_offset
from rocketspark.client.config import ClientConfig
from rocketspark.client.producer.transaction import AsyncTransactionProducer, TransactionStatus
from rocketspark.message.message import Message
from rocketspark.message.validation import TRANS_HALF_TOPIC
from rocketspark.processes import wait_registered
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import pull_all
from tests.transaction.conftest import RecordingListener
from tests.waiting import eventually

SETTINGS = tuple(
    arg
    for setting in (
        "transactionTimeOut=300",
        "transactionCheckInterval=300",
        "transactionCheckMax=1000",
        "duplicateWindowSeconds=0",
        "registerNameServerPeriod=500",
    )
    for arg in ("--set", setting)
)
TOPIC = "TxCrash"


@pytest.mark.slow
async def test_a_half_message_survives_a_kill_and_is_resolved_by_the_check(
    servers: ServerFactory, tmp_path: Path
) -> None:
    namesrv = servers.namesrv()
    data_dir = tmp_path / "broker-data"
    broker = servers.broker(namesrv.address, *SETTINGS, data_dir=data_dir)
    answer = {"check": TransactionStatus.UNKNOWN}
    listener = RecordingListener(TransactionStatus.UNKNOWN, check=lambda _: answer["check"])
    config = ClientConfig(
        namesrv_addr=namesrv.address, heartbeat_broker_interval_ms=200, poll_name_server_interval_ms=200
    )
    client = RemotingClient(request_timeout_s=5)
    try:
        await admin.create_topic(client, broker.address, TopicConfig(TOPIC, 1, 1))
        await asyncio.to_thread(wait_registered, namesrv.address, broker.address, (TOPIC,))
        async with AsyncTransactionProducer("tx_crash", listener, client_config=config) as tx:
            committed = await tx.send_message_in_transaction(Message(TOPIC, b"committed-before"))
            await tx.end_transaction(committed.half, TransactionStatus.COMMIT, wait=True)
            pending = await tx.send_message_in_transaction(Message(TOPIC, b"pending"))
            assert pending.status is TransactionStatus.UNKNOWN
            await eventually(lambda: listener.checked, timeout_s=15, what="a check before the kill")
            assert await get_max_offset(client, broker.address, TRANS_HALF_TOPIC, 0) == 2
            broker.kill()

            restarted = servers.broker(namesrv.address, *SETTINGS, data_dir=data_dir)
            checks_before = len(listener.checked)
            answer["check"] = TransactionStatus.COMMIT

            async def end_again() -> bool:
                await tx.end_transaction(committed.half, TransactionStatus.COMMIT, wait=True)
                return True

            # an end of the message committed before the kill, after the restart (once the producer
            # found the broker's new address): nothing more stored
            await eventually(end_again, timeout_s=15, what="an end after the restart")

            async def both() -> list[bytes]:
                bodies = [m.body for m in await pull_all(client, restarted.address, TOPIC, 0)]
                return bodies if len(bodies) >= 2 else []

            await eventually(both, timeout_s=30, what="the pending message committed by a check after the restart")
            assert len(listener.checked) > checks_before
            # one more check round passes (a later half message is checked): nothing stored twice
            later = await tx.send_message_in_transaction(Message(TOPIC, b"later"))
            await eventually(lambda: any(m.msg_id == later.half.msg_id for m in listener.checked), timeout_s=15)

            async def three() -> list[bytes]:
                bodies = await both()
                return bodies if len(bodies) >= 3 else []

            stored: list[bytes] = await eventually(three, timeout_s=15, what="the later message committed")
            assert sorted(stored) == [b"committed-before", b"later", b"pending"]
    finally:
        await client.close()
