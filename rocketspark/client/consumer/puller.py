"""One pull from one queue, as messages (standard records) or as an Arrow batch.

The Arrow form uses the Arrow pull and falls back to standard pulls with brokers that answer it
REQUEST_CODE_NOT_SUPPORTED (remembered per broker). Standard pulls carry fewer messages (Apache's
brokers at most 32, ours 1,024), so the fallback pulls on, one pull after another, until it holds
the messages asked for, and decodes all their records at once into one batch. Both forms come back
with bodies decompressed and with tags checked exactly (brokers filter by tag hash codes only).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.client.api.pull import PullResult, PullStatus, pull_message
from rocketspark.client.instance import ClientInstance
from rocketspark.errors import ProtocolError, RequestCodeNotSupportedError
from rocketspark.message.batches.columns import decompress_bodies
from rocketspark.message.batches.schema import STORED_SCHEMA
from rocketspark.message.filter import parse_tag_expression
from rocketspark.message.message import MessageExt
from rocketspark.message.records.decoding import decode_records, decode_records_to_batch
from rocketspark.protocol.headers.pull import (
    FLAG_COMMIT_OFFSET,
    FLAG_SUBSCRIPTION,
    FLAG_SUSPEND,
    PullMessageRequestHeader,
)
from rocketspark.protocol.queue import MessageQueue

log = logging.getLogger(__name__)

#: how much longer than the broker's hold a suspended pull may take before the client gives up
SUSPEND_MARGIN_S = 10.0


@dataclass(frozen=True, slots=True)
class Pulled:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class PulledMessages(Pulled):
    messages: list[MessageExt]


@dataclass(frozen=True, slots=True)
class PulledBatch(Pulled):
    #: STORED_SCHEMA batches, as the broker read them from its stored batches (not concatenated:
    #: that copy cost a third of an Arrow consumer's CPU); empty when nothing was found
    batches: list[pa.RecordBatch]

    @property
    def num_rows(self) -> int:
        return sum(batch.num_rows for batch in self.batches)


class QueuePuller:
    def __init__(self, instance: ClientInstance, group: str, *, use_arrow: bool = True) -> None:
        self.instance = instance
        self.group = group
        self.use_arrow = use_arrow
        self._standard_only: set[str] = set()

    async def _pull(
        self,
        queue: MessageQueue,
        offset: int,
        *,
        max_messages: int,
        expression: str,
        suspend_ms: int | None,
        commit_offset: int | None,
        arrow: bool,
        timeout_s: float | None,
    ) -> PullResult:
        sys_flag = FLAG_SUBSCRIPTION
        if suspend_ms:
            sys_flag |= FLAG_SUSPEND
        if commit_offset is not None and commit_offset > 0:
            sys_flag |= FLAG_COMMIT_OFFSET
        header = PullMessageRequestHeader(
            consumer_group=self.group,
            topic=queue.topic,
            queue_id=queue.queue_id,
            queue_offset=offset,
            max_msg_nums=max_messages,
            sys_flag=sys_flag,
            commit_offset=commit_offset or 0,
            suspend_timeout_millis=suspend_ms or 0,
            sub_version=0,
            subscription=expression,
            expression_type="TAG",
        )
        if timeout_s is None:
            timeout_s = (suspend_ms or 0) / 1000 + SUSPEND_MARGIN_S if suspend_ms else None
        address = await self.instance.broker_address(queue.broker_name, queue.topic)
        return await pull_message(self.instance.remoting, address, header, arrow=arrow, timeout_s=timeout_s)

    async def pull_messages(
        self,
        queue: MessageQueue,
        offset: int,
        *,
        max_messages: int = 32,
        expression: str = "*",
        suspend_ms: int | None = None,
        commit_offset: int | None = None,
        timeout_s: float | None = None,
    ) -> PulledMessages:
        """Messages from `offset` through PULL_MESSAGE (standard records)."""
        result = await self._pull(
            queue,
            offset,
            max_messages=max_messages,
            expression=expression,
            suspend_ms=suspend_ms,
            commit_offset=commit_offset,
            arrow=False,
            timeout_s=timeout_s,
        )
        messages = decode_records(result.body, broker_name=queue.broker_name) if result.body else []
        tags = parse_tag_expression(expression)
        if tags is not None:
            messages = [m for m in messages if m.tags in tags]
        return PulledMessages(result.status, result.next_begin_offset, result.min_offset, result.max_offset, messages)

    async def pull_batch(
        self,
        queue: MessageQueue,
        offset: int,
        *,
        max_messages: int = 10_000,
        expression: str = "*",
        suspend_ms: int | None = None,
        commit_offset: int | None = None,
        timeout_s: float | None = None,
    ) -> PulledBatch:
        """Messages from `offset` as STORED_SCHEMA batches, through the Arrow pull when the broker has it."""

        async def attempt(arrow: bool) -> PullResult:
            return await self._pull(
                queue,
                offset,
                max_messages=max_messages,
                expression=expression,
                suspend_ms=suspend_ms,
                commit_offset=commit_offset,
                arrow=arrow,
                timeout_s=timeout_s,
            )

        arrow = self.use_arrow and queue.broker_name not in self._standard_only
        try:
            result = await attempt(arrow)
        except RequestCodeNotSupportedError:
            if not arrow:
                raise
            if queue.broker_name not in self._standard_only:  # pulls in flight at once learn it together
                log.info(
                    "broker %s does not serve the Arrow pull; decoding standard records with it", queue.broker_name
                )
                self._standard_only.add(queue.broker_name)
            arrow = False
            result = await attempt(arrow)
        batches: list[pa.RecordBatch] = []
        if result.status is PullStatus.FOUND and result.body:
            if arrow:
                batches = _read_arrow(result.body)
            else:
                result, bodies = await self._pull_on(queue, offset, result, max_messages, expression, timeout_s)
                batches = [decode_records_to_batch(bodies[0] if len(bodies) == 1 else b"".join(bodies))]
            batches = [kept for batch in batches if (kept := _filter_tags(batch, expression)).num_rows]
        return PulledBatch(result.status, result.next_begin_offset, result.min_offset, result.max_offset, batches)

    async def _pull_on(
        self,
        queue: MessageQueue,
        offset: int,
        first: PullResult,
        max_messages: int,
        expression: str,
        timeout_s: float | None,
    ) -> tuple[PullResult, list[bytes]]:
        """After a standard pull that found messages, pull on from where it ended until the pulls
        have moved `max_messages` offsets, a pull finds nothing, or the queue's end is reached: the
        last pull that found messages and the record bodies of all of them. (Tag filters make the
        broker move past messages it does not return, so fewer may come back.)"""
        result, bodies = first, [first.body]
        while result.next_begin_offset - offset < max_messages and result.next_begin_offset < result.max_offset:
            more = await self._pull(
                queue,
                result.next_begin_offset,
                max_messages=max_messages - (result.next_begin_offset - offset),
                expression=expression,
                suspend_ms=None,
                commit_offset=None,
                arrow=False,
                timeout_s=timeout_s,
            )
            if more.status is not PullStatus.FOUND or not more.body:
                break
            result = more
            bodies.append(more.body)
        return result, bodies


def _read_arrow(body: bytes) -> list[pa.RecordBatch]:
    """The batches of an Arrow pull's answer, bodies inflated. An answer that is not an IPC stream of
    STORED_SCHEMA is a ProtocolError (a broker this client cannot read, not a message to skip); a
    body that does not decompress is a DecodeError."""
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(body))
        batches = list(reader)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ProtocolError(f"the broker's Arrow pull answer is not an Arrow IPC stream: {exc}") from None
    if not reader.schema.equals(STORED_SCHEMA):
        raise ProtocolError(f"the broker's Arrow pull answered schema {reader.schema}, not the stored batch schema")
    return [_inflated(batch) for batch in batches]


def _inflated(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with compressed bodies inflated (and their COMPRESSED flag cleared)."""
    sys_flags = batch.column("sys_flag").to_numpy()
    if np.any(sys_flags & 0x1):
        bodies, flags = decompress_bodies(batch.column("body"), sys_flags)
        batch = batch.set_column(batch.schema.get_field_index("body"), "body", bodies)
        batch = batch.set_column(batch.schema.get_field_index("sys_flag"), "sys_flag", pa.array(flags, pa.int32()))
    return batch


def _filter_tags(batch: pa.RecordBatch, expression: str) -> pa.RecordBatch:
    tags = parse_tag_expression(expression)
    if tags is None:
        return batch
    return batch.filter(pc.fill_null(pc.is_in(batch.column("tags"), value_set=pa.array(sorted(tags))), False))
