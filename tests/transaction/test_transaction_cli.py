"""`rocketspark topic describe` counts a topic's half messages that wait for their commit or rollback."""

from __future__ import annotations

import pytest

from rocketspark.cli import main
from rocketspark.client.producer.transaction import TransactionStatus
from rocketspark.client.producer.transaction_sync import TransactionProducer
from rocketspark.message.message import Message
from tests.harness import ServerFactory
from tests.transaction.conftest import RecordingListener


def describe(capsys: pytest.CaptureFixture[str], topic: str, namesrv: str) -> str:
    assert main(["topic", "describe", topic, "--namesrv", namesrv]) == 0
    return capsys.readouterr().out


def test_describe_counts_the_half_messages_waiting(
    servers: ServerFactory, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    namesrv = servers.namesrv()
    servers.broker(namesrv.address)  # checks after 6 s: none during the test
    assert main(["topic", "create", "TxWaiting", "--queues", "2", "--namesrv", namesrv.address]) == 0
    listener = RecordingListener(TransactionStatus.UNKNOWN)
    with TransactionProducer("tx_cli", listener, namesrv_addr=namesrv.address) as producer:
        halves = [producer.send_half(Message("TxWaiting", f"open {i}".encode()))[1] for i in range(3)]
        out = describe(capsys, "TxWaiting", namesrv.address)
        assert "half messages waiting for a commit or rollback: 3 (broker-a: 3)" in out
        producer.end_transaction(halves[0], TransactionStatus.COMMIT, wait=True)
        producer.end_transaction(halves[1], TransactionStatus.ROLLBACK, wait=True)
        out = describe(capsys, "TxWaiting", namesrv.address)
        assert "half messages waiting for a commit or rollback: 1 (broker-a: 1)" in out
        producer.end_transaction(halves[2], TransactionStatus.COMMIT, wait=True)
    out = describe(capsys, "TxWaiting", namesrv.address)
    assert "half messages waiting for a commit or rollback: 0 (broker-a: 0)" in out
