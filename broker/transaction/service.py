"""`TransactionService`: ends half messages exactly once (ends.py) and asks producers about the others.

`flavor=apache` runs
:class:`broker.transaction.apache.ApacheTransactionService` instead, which ends and checks as Apache 4.9.

Every `transactionCheckInterval` ms the check goes through the half messages not ended, oldest
first, down to those stored less than `transactionTimeOut` ms ago: a half message checked
`transactionCheckMax` times already is moved to TRANS_CHECK_MAX_TIME_TOPIC, the others are counted
and their producer group asked (CHECK_TRANSACTION_STATE, oneway) on any live connection of it. One
born less than its CHECK_IMMUNITY_TIME_IN_SECONDS ago is passed: neither asked about nor counted;
a batch of half messages the broker remembers (range_end.py) that is immune is passed whole, unread,
so a batch of millions of rows open for minutes costs the check nothing.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from broker.managers.producer_manager import ProducerManager
from broker.store.message_store import MessageStore
from broker.store.results import GetStatus
from broker.transaction.ends import STEP_BYTES, HalfMessageEnds
from broker.transaction.half import (
    EndKind,
    discarded_message,
    ended,
    immunity_ms,
    real_queue,
)
from broker.transaction.state import TransactionState
from rocketspark.errors import RocketMQError
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.message.batches.schema import STORED_SCHEMA
from rocketspark.message.ids import offset_msg_id
from rocketspark.message.properties import codec as props
from rocketspark.message.records.encoding import encode_records
from rocketspark.message.validation import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.transaction import (
    CheckTransactionStateRequestHeader,
)
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)

#: half messages or end records read in one step
_STEP_MESSAGES = 1024
#: how often the progress is written while the commit log grows
_PERSIST_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class CheckSettings:
    """broker.conf's transactionTimeOut, transactionCheckInterval (ms) and transactionCheckMax."""

    timeout_ms: int
    interval_ms: int
    check_max: int


class TransactionService(HalfMessageEnds):
    def __init__(
        self,
        store: MessageStore,
        producers: ProducerManager,
        settings: CheckSettings,
        writer: AtomicFileWriter,
        create_topic: Callable[[str], object],
    ) -> None:
        """`create_topic`: creates the config of an internal topic of one queue (readable by tools)."""
        super().__init__(store, TransactionState(writer))
        self._create_topic = create_topic
        self._producers = producers
        self.settings = settings
        self._writer = writer
        self._services = [
            PeriodicService("check-transactions", settings.interval_ms / 1000, self.check),
            PeriodicService("persist-transactions", _PERSIST_INTERVAL_S, self._persist_if_moved),
        ]

    async def load(self) -> None:
        """Read the progress and the end records, and end the commits a crash left without one
        (after the store recovered, before the broker serves)."""
        self.state.load()
        # a crash may have lost end records the progress counted: new ones then take their offsets
        counted = min(self.state.op_offset, self._store.max_offset(TRANS_OP_HALF_TOPIC, 0))
        offset = first = max(self._store.min_offset(TRANS_OP_HALF_TOPIC, 0), counted, 0)
        while True:
            rows, offset = await self._read(TRANS_OP_HALF_TOPIC, offset)
            if not rows:
                break
            for row in rows:
                record = ended(row)
                if record is not None:
                    offsets, kind = record
                    for half_offset in offsets:
                        self.state.end(half_offset, kind)
        log.info("transaction end records %d..%d read back (the progress counted those before)", first, offset)
        unrecorded = self.state.committed_since_watermark(self._store.commit_log)
        if unrecorded:
            await self._record_end(sorted(set(unrecorded)), EndKind.COMMIT)
        if unrecorded:
            log.info("%d committed half message(s) had no end record after a crash; recorded now", len(unrecorded))
        self._persist()

    def start(self) -> None:
        for service in self._services:
            service.start()

    async def stop(self) -> None:
        for service in self._services:
            await service.stop()
        if self._ending:
            await asyncio.gather(*(future for future, _ in self._ending.values()), return_exceptions=True)
        self._persist()
        await self._writer.flush()

    # -- the check -----------------------------------------------------------------------------

    async def check(self) -> None:
        """One round of the check (the periodic service runs it; tests may call it)."""
        now_ms = int(time.time() * 1000)
        timeout_ms = self.settings.timeout_ms
        offset = self.state.next_half
        while True:
            immune_end = self._half_batches.immune_end(offset, now_ms, timeout_ms)
            if immune_end is not None:  # a batch of half messages still immune: none of it is read
                offset = immune_end
                continue
            rows, next_offset = await self._read(TRANS_HALF_TOPIC, offset)
            if not rows:
                break
            for row in rows:
                half_offset = row["queue_offset"]
                if self.state.has_ended(half_offset) or half_offset in self._ending:
                    continue
                if self._half_batches.immune_end(half_offset, now_ms, timeout_ms) is not None:
                    continue
                if now_ms - row["store_timestamp"] < self.settings.timeout_ms:
                    next_offset = -1
                    break
                immune_ms = immunity_ms(props.decode_properties(row["properties"]), self.settings.timeout_ms)
                if immune_ms is not None and now_ms - row["born_timestamp"] < immune_ms:
                    continue  # not checked (nor counted) yet; later half messages may be
                if self.state.checks(half_offset) >= self.settings.check_max:
                    await self._discard(row)
                else:
                    self._ask(row, self.state.checked(half_offset))
            if next_offset < 0:
                break
            offset = next_offset
        self.state.advance(self._store.min_offset(TRANS_HALF_TOPIC, 0))
        self._half_batches.forget_below(self.state.next_half)
        self._persist()

    def _ask(self, row: dict[str, Any], checks: int) -> None:
        """Send CHECK_TRANSACTION_STATE for the half message to one live producer of its group."""
        topic, queue_id, properties = real_queue(row)
        group = properties.get(props.PRODUCER_GROUP, "")
        channels = list(self._producers.groups.get(group, {}))
        if not channels:
            log.warning("half message %d: no producer of group %s is connected to ask", row["queue_offset"], group)
            return
        uniq_key = properties.get(props.UNIQ_KEY)
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=row["queue_offset"],
            commit_log_offset=row["commit_log_offset"],
            msg_id=uniq_key,
            transaction_id=properties.get(props.TRANSACTION_ID, uniq_key),
            offset_msg_id=offset_msg_id(self._store.store_host, row["commit_log_offset"]),
            topic=topic,
        )
        shown = {**row, "topic": topic, "queue_id": queue_id}
        shown["properties"] = props.encode_properties({**properties, props.TRANSACTION_CHECK_TIMES: str(checks)})
        body = encode_records(pa.RecordBatch.from_pylist([shown], schema=STORED_SCHEMA), self._store.store_host)
        request = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header, body=body, oneway=True)
        connection = random.choice(channels)
        try:
            connection.invoke_oneway(request)
        except RocketMQError as exc:
            log.warning(
                "asking %s about half message %d failed: %s", connection.remote_address, row["queue_offset"], exc
            )

    async def _discard(self, row: dict[str, Any]) -> None:
        half_offset = row["queue_offset"]
        topic, queue_id, message = discarded_message(row, self.state.checks(half_offset))
        self._create_topic(topic)
        await self._store.put_messages(topic, queue_id, [message])
        await self._record_end(half_offset, EndKind.DISCARD)
        log.warning(
            "half message %d (%s) unresolved after %d checks: moved to %s",
            half_offset,
            row["msg_id"],
            self.state.checks(half_offset) or self.settings.check_max,
            topic,
        )

    async def waiting(self) -> Counter[str]:
        """Half messages not ended, per real topic (discarded ones not counted)."""
        counts: Counter[str] = Counter()
        offset = self.state.next_half
        while True:
            rows, offset = await self._read(TRANS_HALF_TOPIC, offset)
            if not rows:
                return counts
            for row in rows:
                if not self.state.has_ended(row["queue_offset"]):
                    counts[real_queue(row)[0]] += 1

    # -- helpers -------------------------------------------------------------------------------

    async def _read(self, topic: str, offset: int) -> tuple[list[dict[str, Any]], int]:
        """The next stored messages of queue 0 of `topic` from `offset`, and the offset after them."""
        while True:
            result = await self._store.get_messages(topic, 0, offset, max_messages=_STEP_MESSAGES, max_bytes=STEP_BYTES)
            if result.status is GetStatus.FOUND:
                return [row for batch in result.batches() for row in batch.to_pylist()], result.next_begin_offset
            if result.status in (GetStatus.MESSAGE_WAS_REMOVING, GetStatus.OFFSET_TOO_SMALL):
                if result.next_begin_offset <= offset:
                    return [], offset
                offset = result.next_begin_offset
                continue
            return [], offset

    def _persist(self) -> None:
        """Write the progress: commits stored before the oldest end under way have their end record,
        and end records before the oldest one being written are counted in the state (one stored
        but not yet counted is read back at startup: counting an end twice changes nothing)."""
        starts = [start for _, start in self._ending.values()]
        op_offset = min(self._op_writes.values(), default=self._store.max_offset(TRANS_OP_HALF_TOPIC, 0))
        self.state.persist(min(starts, default=self._store.commit_log.max_offset), max(op_offset, 0))

    def _persist_if_moved(self) -> None:
        if self.state.watermark != self._store.commit_log.max_offset:
            self.state.advance(self._store.min_offset(TRANS_HALF_TOPIC, 0))
            self._half_batches.forget_below(self.state.next_half)
            self._persist()
