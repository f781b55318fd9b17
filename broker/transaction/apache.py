"""`ApacheTransactionService`: transactions as Apache RocketMQ 4.9 runs them (broker.conf `flavor=apache`).

What a producer can tell apart from the default flavor (docs/operations.md, "flavor=apache"):

* Every END_TRANSACTION that names a stored half message stores its final message: a second
  commit of one half message stores the message a second time (EndTransactionProcessor has no
  duplicate check); each END writes an end record ("op") of the half message's offset.
* A check round goes through the half queue from where the last one stopped
  (TransactionalMessageServiceImpl.check). A half message with an end record at or past the round's
  start is passed. One whose TRANSACTION_CHECK_TIMES property says `transactionCheckMax` checks
  happened already, or born longer ago than the store keeps files, is moved to
  TRANS_CHECK_MAX_TIME_TOPIC (no end record: an END still commits it). The round stops at a half
  message stored since it began, and at one born less than `transactionTimeOut` ago.
* A half message still open after that is written back to the half queue as a copy (same UNIQ_KEY,
  body and properties, TRANSACTION_CHECK_TIMES one higher, a new queue and commit log offset:
  putBackHalfMsgQueue) and the producer group is asked about the copy. Every round counts,
  whatever the producer answers; the copy is what later rounds see and count.
* A half message with CHECK_IMMUNITY_TIME_IN_SECONDS is not asked about before that many seconds
  after its birth (-1: `transactionTimeOut`): each round writes it back as a copy that names the
  first one in TRAN_PREPARED_QUEUE_OFFSET, and counts the round on the copy as on any other. A copy
  whose first half message has an end record at or past the round's start is passed; one ended
  before that is written back again, as Apache does.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from broker.store.writer.append_requests import StandardMessage
from broker.transaction.half import EndKind, discarded_message, immunity_ms
from broker.transaction.service import TransactionService
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TRANS_HALF_TOPIC
from rocketspark.protocol.headers.transaction import EndTransactionRequestHeader

log = logging.getLogger(__name__)


def _number(text: str) -> int:
    """Apache's getLong/getInt: -1 for what is not a number."""
    try:
        return int(text)
    except ValueError:
        return -1


@dataclasses.dataclass(frozen=True, slots=True)
class _Copy:
    """A half message to write back, and whether the producer is then asked about the copy."""

    row: dict[str, Any]
    message: StandardMessage
    checks: int
    ask: bool


class ApacheTransactionService(TransactionService):
    """Ends every END as asked and checks as Apache 4.9's TransactionalMessageServiceImpl does."""

    def _ended_already(self, offset: int, kind: EndKind, header: EndTransactionRequestHeader) -> str | None:
        return None  # every END stores again

    async def check(self) -> None:
        start_ms = int(time.time() * 1000)
        round_start = offset = self.state.next_half
        reached = offset
        reserved_ms = int(self._store.config.file_reserved_time * 3600 * 1000)
        while True:
            rows, next_offset = await self._read(TRANS_HALF_TOPIC, offset)
            if not rows:
                break
            copies: list[_Copy] = []
            stopped = False
            for row in rows:
                half_offset = row["queue_offset"]
                if not self.state.has_ended(half_offset):
                    copy = self._visit(row, round_start, start_ms, reserved_ms)
                    if copy is None:
                        stopped = True
                        break
                    if isinstance(copy, _Copy):
                        copies.append(copy)
                    elif copy:
                        await self._discard_as_apache(row)
                reached = half_offset + 1
            await self._write_back(copies)
            if stopped:
                break
            offset = next_offset
        self.state.advance(self._store.min_offset(TRANS_HALF_TOPIC, 0), reached)
        self._persist()

    def _visit(self, row: dict[str, Any], round_start: int, start_ms: int, reserved_ms: int) -> _Copy | bool | None:
        """What a round does with an open half message: None to stop the round, True to discard it,
        False to pass it, or the copy to write back."""
        properties = props.decode_properties(row["properties"])
        counted = properties.get(props.TRANSACTION_CHECK_TIMES)
        checks = 1 if counted is None else _number(counted) + 1
        now_ms = int(time.time() * 1000)
        if checks - 1 >= self.settings.check_max or now_ms - row["born_timestamp"] > reserved_ms:
            return True
        if row["store_timestamp"] >= start_ms:
            return None  # stored since the round began: the next round sees it
        age_ms = now_ms - row["born_timestamp"]
        immune_ms = immunity_ms(properties, self.settings.timeout_ms)
        counted_copy = StandardMessage.from_stored(row).with_properties({props.TRANSACTION_CHECK_TIMES: str(checks)})
        if immune_ms is None:
            if 0 <= age_ms < self.settings.timeout_ms:
                return None
            return _Copy(row, counted_copy, checks, ask=True)
        if age_ms < immune_ms:
            first = properties.get(props.TRANSACTION_PREPARED_QUEUE_OFFSET)
            if first is None:
                first = str(row["queue_offset"])
            elif _number(first) >= round_start and self.state.has_ended(_number(first)):
                return False
            if _number(first) != -1:
                marked = counted_copy.with_properties({props.TRANSACTION_PREPARED_QUEUE_OFFSET: first})
                return _Copy(row, marked, checks, ask=False)
        return _Copy(row, counted_copy, checks, ask=True)

    async def _write_back(self, copies: list[_Copy]) -> None:
        """Store the copies at the end of the half queue, then ask about those to check."""
        if not copies:
            return
        messages = [dataclasses.replace(copy.message, wait_store_ok=False) for copy in copies]
        result = await self._store.put_messages(TRANS_HALF_TOPIC, 0, messages)
        for index, (copy, commit_log_offset) in enumerate(zip(copies, result.commit_log_offsets, strict=True)):
            if not copy.ask:
                continue
            stored = {
                **copy.row,
                "queue_offset": result.first_queue_offset + index,
                "commit_log_offset": commit_log_offset,
                "properties": copy.message.properties,
            }
            log.debug("half message %d open: checking its copy %d", copy.row["queue_offset"], stored["queue_offset"])
            self._ask(stored, copy.checks)

    async def _discard_as_apache(self, row: dict[str, Any]) -> None:
        """Move the half message to TRANS_CHECK_MAX_TIME_TOPIC as it is (no end record)."""
        counted = props.decode_properties(row["properties"]).get(props.TRANSACTION_CHECK_TIMES, "0")
        topic, queue_id, message = discarded_message(row, _number(counted))
        self._create_topic(topic)
        await self._store.put_messages(topic, queue_id, [message])
        log.warning(
            "half message %d (%s) checked %s times: moved to %s", row["queue_offset"], row["msg_id"], counted, topic
        )
