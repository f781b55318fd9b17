"""`TransactionProducer`: the blocking twin of AsyncTransactionProducer (rocketspark/client/producer/transaction.py)."""

from __future__ import annotations

from typing import Any

from rocketspark.client.api.send import SendResult
from rocketspark.client.producer.transaction import (
    AsyncTransactionProducer,
    HalfMessage,
    TransactionListener,
    TransactionSendResult,
    TransactionStatus,
)
from rocketspark.client.sync import GRACE_S, _Blocking
from rocketspark.message.message import Message
from rocketspark.protocol.queue import MessageQueue


class TransactionProducer(_Blocking):
    """Blocking transaction producer, as Java's TransactionMQProducer; the listener runs on the
    producer's check threads. Options: those of :class:`AsyncTransactionProducer`."""

    def __init__(self, group: str, listener: TransactionListener, **options: Any) -> None:
        super().__init__()
        self.async_producer = AsyncTransactionProducer(group, listener, **options)
        self._timeout_s = self.async_producer.send_timeout_ms / 1000 + GRACE_S

    def start(self) -> None:
        self._run(self.async_producer.start(), self._timeout_s)

    def shutdown(self) -> None:
        self._run(self.async_producer.shutdown(), self._timeout_s)

    def send_message_in_transaction(self, message: Message, arg: Any = None) -> TransactionSendResult:
        """Send a half message, run `execute_local_transaction(message, arg)`, end the message by its answer."""
        return self._run(self.async_producer.send_message_in_transaction(message, arg), None)

    def send_half(
        self, message: Message, *, queue: MessageQueue | None = None, sharding_key: str | None = None
    ) -> tuple[SendResult, HalfMessage]:
        coroutine = self.async_producer.send_half(message, queue=queue, sharding_key=sharding_key)
        return self._run(coroutine, self._timeout_s)

    def end_transaction(self, half: HalfMessage, status: TransactionStatus, *, wait: bool = False) -> None:
        self._run(self.async_producer.end_transaction(half, status, wait=wait), self._timeout_s)
