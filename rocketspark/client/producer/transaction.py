"""`AsyncTransactionProducer`: Apache RocketMQ's TransactionMQProducer (docs/client.md, "Transactions").

`send_message_in_transaction` sends a half message (TRAN_MSG=true, PGROUP: the broker keeps it from
consumers), runs the listener's `execute_local_transaction` and ends the half message with
END_TRANSACTION (oneway, as Java) by its answer: commit makes it visible, rollback discards it,
unknown leaves it to the broker's check. A check (CHECK_TRANSACTION_STATE, from any broker, on any
connection of the group) runs `check_local_transaction` on the producer's check threads, never on
the event loop, and is answered the same way. `send_half` and `end_transaction` are the two steps
apart, for callers (the Spark sink) that end half messages later, from another process;
`send_half_batch` and `end_range` are the bundled broker's batch forms of them (docs/protocol.md,
"Extensions"): an Arrow batch of half messages of one transaction, and the end of a transaction's
half messages in a range of the half queue. A broker without them (Apache RocketMQ's) is remembered,
and the caller sends single half messages to it.

A producer may send for another group (`check_group`): its half messages name that group (PGROUP),
so the broker asks that group's producers about them, and its ENDs carry it, as the broker requires.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.client.api.send import SendResult, SendStatus, send_message
from rocketspark.client.api.transaction import end_transaction, end_transaction_range
from rocketspark.client.instance import ClientInstance
from rocketspark.client.producer.producer import AsyncProducer
from rocketspark.client.producer.send_retry import Limits, send_with_retries
from rocketspark.errors import RequestCodeNotSupportedError, RocketMQError, ValidationError
from rocketspark.message import sysflag
from rocketspark.message.ids import decode_offset_msg_id
from rocketspark.message.message import Message, MessageExt
from rocketspark.message.properties import codec as props
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.transaction import (
    CheckTransactionStateRequestHeader,
    EndTransactionRangeRequestHeader,
    EndTransactionRangeResponseHeader,
    EndTransactionRequestHeader,
)
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.connection import Connection

log = logging.getLogger(__name__)


class TransactionStatus(enum.Enum):
    """Java's LocalTransactionState."""

    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    UNKNOWN = "UNKNOW"

    @property
    def sys_flag(self) -> int:
        """The END_TRANSACTION `commitOrRollback` of this state."""
        return _SYS_FLAGS[self]


_SYS_FLAGS = {
    TransactionStatus.COMMIT: sysflag.TRANSACTION_COMMIT_TYPE,
    TransactionStatus.ROLLBACK: sysflag.TRANSACTION_ROLLBACK_TYPE,
    TransactionStatus.UNKNOWN: sysflag.TRANSACTION_NOT_TYPE,
}


class TransactionListener(Protocol):
    """Java's TransactionListener. Both methods run on a thread of their own (not the event loop)."""

    def execute_local_transaction(self, message: Message, arg: Any) -> TransactionStatus:
        """Run the local transaction the half message belongs to; its outcome ends the message."""
        ...

    def check_local_transaction(self, message: MessageExt) -> TransactionStatus:
        """The outcome of the local transaction of a half message left unknown (the broker asks).
        `message` is the half message with its real topic and queue; its msg_id is its UNIQ_KEY."""
        ...


@dataclass(frozen=True, slots=True)
class HalfMessage:
    """What ends a half message: where the broker stored it. Picklable, so another process can end it."""

    topic: str
    broker_name: str
    queue_offset: int  # in RMQ_SYS_TRANS_HALF_TOPIC (Java's tranStateTableOffset)
    commit_log_offset: int
    msg_id: str  # its UNIQ_KEY, which the committed message keeps
    queue_id: int = -1  # the queue of `topic` its commit goes to (-1: not known)

    @classmethod
    def of(cls, result: SendResult) -> HalfMessage:
        _, commit_log_offset = decode_offset_msg_id(result.offset_msg_id)
        queue = result.message_queue
        return cls(
            queue.topic, queue.broker_name, result.queue_offset, commit_log_offset, result.msg_id, queue.queue_id
        )


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    send_result: SendResult
    half: HalfMessage
    status: TransactionStatus  # what the local transaction answered (ROLLBACK when the send was not SEND_OK)


class AsyncTransactionProducer(AsyncProducer):
    def __init__(
        self,
        group: str,
        listener: TransactionListener,
        *,
        check_threads: int = 1,
        check_group: str | None = None,
        **options: Any,
    ) -> None:
        """`check_threads`: threads that run the listener (Java's checkThreadPoolMinSize);
        `check_group`: the group whose producers the brokers ask about its half messages (default
        `group`); `options`: those of :class:`~rocketspark.client.producer.producer.AsyncProducer`."""
        super().__init__(group, **options)
        self.check_group = check_group or group
        self._no_half_batches: set[str] = set()  # brokers that answered the batch forms "not supported"
        if check_threads <= 0:
            raise ValidationError(f"check_threads must be positive, got {check_threads}")
        self.listener = listener
        self._check_threads = check_threads
        self._pool: ThreadPoolExecutor | None = None
        self._checks: set[asyncio.Task[None]] = set()
        self._introduced: set[str] = set()  # brokers told of the group since the start

    async def start(self) -> None:
        await super().start()
        self._pool = ThreadPoolExecutor(self._check_threads, thread_name_prefix=f"transaction-check-{self.group}")
        self._running().set_transaction_checker(self.group, self._on_check)

    async def shutdown(self) -> None:
        await super().shutdown()
        for task in list(self._checks):
            task.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the two steps -------------------------------------------------------------------------

    async def send_half(
        self,
        message: Message,
        *,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
        uniq_key: str | None = None,
        timeout_ms: int | None = None,
    ) -> tuple[SendResult, HalfMessage]:
        """Send `message` as a half message (no consumer sees it until it is committed), within
        `timeout_ms` (default: the producer's `send_timeout_ms`)."""
        if message.delay_level or message.deliver_time_ms is not None:
            raise ValidationError("a transactional message may not be delayed (delay_level, deliver_time_ms)")
        header, body, uniq_key = self._prepare(message, uniq_key)
        # appended: _prepare refuses these system keys among the message's own properties
        marks = props.encode_properties({props.TRANSACTION_PREPARED: "true", props.PRODUCER_GROUP: self.check_group})
        header.properties = (header.properties or "") + marks
        header.sys_flag |= sysflag.TRANSACTION_PREPARED_TYPE

        async def attempt(instance: ClientInstance, target: MessageQueue, timeout_s: float) -> SendResult:
            header.queue_id = target.queue_id
            address = await instance.broker_address(target.broker_name, target.topic)
            return await send_message(
                instance.remoting, address, target.broker_name, header, body, msg_id=uniq_key, timeout_s=timeout_s
            )

        result = await self._with_retries(message.topic, queue, sharding_key, Limits(timeout_ms), attempt)
        await self._introduce(result.message_queue.broker_name)
        return result, HalfMessage.of(result)

    async def _introduce(self, broker_name: str) -> None:
        """Heartbeat once to a broker that holds a first half message of ours: its checks reach the
        group from then on, not only after the next periodic heartbeat."""
        if broker_name not in self._introduced:
            self._introduced.add(broker_name)
            await self._running().heartbeat()

    async def end_transaction(
        self, half: HalfMessage, status: TransactionStatus, *, wait: bool = False, timeout_ms: int | None = None
    ) -> None:
        """End `half` by `status`: oneway, as Java, or with `wait` until the broker stored the end (an
        end the broker answers SYSTEM_BUSY, having stored nothing, is sent again after a backoff, as
        sends are, until `timeout_ms`, default `send_timeout_ms`)."""
        instance = self._running()
        timeout_s = (timeout_ms or self.send_timeout_ms) / 1000
        header = EndTransactionRequestHeader(
            producer_group=self.check_group,
            tran_state_table_offset=half.queue_offset,
            commit_log_offset=half.commit_log_offset,
            commit_or_rollback=status.sys_flag,
            msg_id=half.msg_id,
            from_transaction_check=False,
            transaction_id=half.msg_id,
            topic=half.topic,
        )
        if not wait:
            address = await instance.broker_address(half.broker_name, half.topic)
            await end_transaction(instance.remoting, address, header, timeout_s=timeout_s)
            return
        queue = MessageQueue(half.topic, half.broker_name, 0)

        async def choose(avoid: str | None) -> MessageQueue:
            return queue

        async def attempt(target: MessageQueue, remaining_s: float) -> None:
            address = await instance.broker_address(target.broker_name, target.topic)
            await end_transaction(instance.remoting, address, header, oneway=False, timeout_s=remaining_s)

        await send_with_retries(
            half.topic,
            choose,
            attempt,
            retries=0,
            timeout_s=timeout_s,
            fixed_queue=True,
            refresh_route=lambda: instance.route(half.topic, refresh=True),
        )

    # -- the batch forms (bundled brokers) -----------------------------------------------------

    def serves_half_batches(self, broker_name: str) -> bool:
        """Whether `broker_name` is not known to lack the batch forms."""
        return broker_name not in self._no_half_batches

    async def send_half_batch(
        self,
        batch: pa.RecordBatch,
        queue: MessageQueue,
        *,
        transaction_id: str,
        properties: Mapping[str, str],
        timeout_ms: int | None = None,
    ) -> SendResult | None:
        """Send `batch` (PRODUCER_SCHEMA) as half messages of
        `transaction_id` to `queue`, each with `properties` besides its own, within `timeout_ms`;
        what the broker stored (`queue_offset`: the first row's half-queue offset, the others follow),
        or None from a broker without ARROW_SEND_HALF_MESSAGE, which is then remembered. Retried as
        the producer's sends are (the Spark sink's producer does not: a batch that timed out may be
        stored, and a second copy would be ended with it)."""
        given = batch.column("uniq_key")
        if given.null_count:  # ids for the rows without one, as the Arrow send gives them
            uniq = pc.coalesce(given, self._ids.next_many(len(batch)))
            batch = batch.set_column(batch.schema.get_field_index("uniq_key"), "uniq_key", uniq)
        common = {
            **properties,
            props.TRANSACTION_PREPARED: "true",
            props.PRODUCER_GROUP: self.check_group,
            props.TRANSACTION_ID: transaction_id,
            props.WAIT_STORE_MSG_OK: "true",
        }
        header = self._header(Message(queue.topic, b""), common, 0)
        attempt = self._arrow_attempt(
            header, batch, self._no_half_batches, self._learn_no_batches, ExtensionCode.ARROW_SEND_HALF_MESSAGE
        )
        result = await self._with_retries(queue.topic, queue, None, Limits(timeout_ms), attempt)
        if result is not None:
            await self._introduce(queue.broker_name)
        return result

    async def end_range(
        self,
        broker_name: str,
        transaction_id: str,
        first: int,
        last: int,
        status: TransactionStatus,
        *,
        topic: str,
        timeout_ms: int | None = None,
    ) -> int:
        """End the half messages of `transaction_id` in half-queue offsets `first`..`last` of
        `broker_name` (whose route `topic` gives) by COMMIT or ROLLBACK, in offset order, a step per
        request, each within `timeout_ms`; how many there were (ended now or before, alike).
        RequestCodeNotSupportedError from a broker without END_TRANSACTION_RANGE."""
        instance = self._running()
        timeout_s = (timeout_ms or self.send_timeout_ms) / 1000
        ended = 0
        offset = first
        while offset <= last:
            header = EndTransactionRangeRequestHeader(
                producer_group=self.check_group,
                transaction_id=transaction_id,
                first_offset=offset,
                last_offset=last,
                commit_or_rollback=status.sys_flag,
            )
            answer = await self._end_range_step(instance, broker_name, topic, header, timeout_s)
            if answer.next_offset <= offset:
                raise RocketMQError(f"broker {broker_name} ended no step of the range from offset {offset}")
            ended += answer.count
            offset = answer.next_offset
        return ended

    async def _end_range_step(
        self,
        instance: ClientInstance,
        broker_name: str,
        topic: str,
        header: EndTransactionRangeRequestHeader,
        timeout_s: float,
    ) -> EndTransactionRangeResponseHeader:
        queue = MessageQueue(topic, broker_name, 0)

        async def choose(avoid: str | None) -> MessageQueue:
            return queue

        async def attempt(target: MessageQueue, remaining_s: float) -> EndTransactionRangeResponseHeader:
            address = await instance.broker_address(target.broker_name, target.topic)
            try:
                return await end_transaction_range(instance.remoting, address, header, remaining_s)
            except RequestCodeNotSupportedError:
                self._learn_no_batches(broker_name)
                raise

        return await send_with_retries(
            topic,
            choose,
            attempt,
            retries=0,
            timeout_s=timeout_s,
            fixed_queue=True,
            refresh_route=lambda: instance.route(topic, refresh=True),
        )

    def _learn_no_batches(self, broker_name: str) -> None:
        if broker_name not in self._no_half_batches:  # sends in flight at once learn it together
            log.info("broker %s does not serve batches of half messages; sending them one by one", broker_name)
            self._no_half_batches.add(broker_name)

    # -- Java's API ----------------------------------------------------------------------------

    async def send_message_in_transaction(self, message: Message, arg: Any = None) -> TransactionSendResult:
        """Send a half message, run the local transaction, end the message by its outcome."""
        result, half = await self.send_half(message)
        status = TransactionStatus.ROLLBACK
        if result.status is SendStatus.SEND_OK:
            status = await self._listen(self.listener.execute_local_transaction, message, arg)
        try:
            await self.end_transaction(half, status)
        except RocketMQError as exc:  # the broker's check asks later, as in Java
            log.warning("ending half message %s (%s) failed: %s", half.msg_id, status.name, exc)
        return TransactionSendResult(result, half, status)

    async def _listen(self, method: Any, *args: Any) -> TransactionStatus:
        """Run a listener method on a check thread; an error or a wrong answer counts as UNKNOWN."""
        loop = asyncio.get_running_loop()
        try:
            status = await loop.run_in_executor(self._pool, method, *args)
        except Exception:
            log.exception("transaction listener of group %s failed: state unknown", self.group)
            return TransactionStatus.UNKNOWN
        if not isinstance(status, TransactionStatus):
            log.error("transaction listener of group %s answered %r: state unknown", self.group, status)
            return TransactionStatus.UNKNOWN
        return status

    # -- the broker's check --------------------------------------------------------------------

    def _on_check(self, connection: Connection, request: RemotingCommand, message: MessageExt) -> None:
        task = asyncio.ensure_future(self._answer_check(connection.remote_address, request, message))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _answer_check(self, broker_addr: str, request: RemotingCommand, message: MessageExt) -> None:
        check = request.decode_header(CheckTransactionStateRequestHeader)
        status = await self._listen(self.listener.check_local_transaction, message)
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=check.tran_state_table_offset,
            commit_log_offset=check.commit_log_offset,
            commit_or_rollback=status.sys_flag,
            msg_id=message.properties.get(props.UNIQ_KEY, message.msg_id),
            from_transaction_check=True,
            transaction_id=check.transaction_id,
            topic=message.topic,
        )
        try:
            await end_transaction(self._running().remoting, broker_addr, header, oneway=True)
        except RocketMQError as exc:
            log.warning("answering the check of %s at %s failed: %s", message.msg_id, broker_addr, exc)
