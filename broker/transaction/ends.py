"""`HalfMessageEnds`: how the broker ends half messages, one by END_TRANSACTION or a transaction's by
range (END_TRANSACTION_RANGE), each at most once on the default flavor.

An END_TRANSACTION commit stores the half message in its real queue, then its end record; a
rollback stores the end record only. Beyond Apache RocketMQ (which stores a commit again), each
half message is committed at most once: ends of one half message wait for each other on the event
loop, and one that finds it committed or rolled back changes nothing, whether it is a retry, a
check's answer racing the producer's own end, or comes after a restart (broker/transaction/state.py);
one that contradicts how it ended is refused (SYSTEM_ERROR). END_TRANSACTION_RANGE (this project's,
with ARROW_SEND_HALF_MESSAGE) ends the half messages of one transaction in a range of the half queue
a step at a time, committing each real queue's rows as producer batches (range_end.py), under the
same rules. An end is done once its commit is stored: counted at once, its end record stored after
(`_record_end`). The check and the service's life are in service.py; `flavor=apache`'s ends in
apache.py.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from broker.store.message_store import MessageStore
from broker.store.results import GetStatus, PutResult
from broker.store.writer.append_requests import StandardMessage
from broker.transaction.coalesce import Coalescer
from broker.transaction.half import EndKind, committed_message, end_record
from broker.transaction.range_end import CommitRun, HalfBatch, HalfBatches, RangeStep, transaction_rows
from broker.transaction.state import TransactionState
from rocketspark.errors import RocketMQError, ValidationError
from rocketspark.message.batches.schema import STORED_SCHEMA
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketspark.protocol.codes import ResponseCode
from rocketspark.protocol.headers.transaction import EndTransactionRangeRequestHeader, EndTransactionRequestHeader

log = logging.getLogger(__name__)

#: bytes of half messages or end records read in one step
STEP_BYTES = 16 * 1024 * 1024
#: half-queue offsets one END_TRANSACTION_RANGE request goes through at most, and in one step
RANGE_REQUEST_MESSAGES = 65_536
RANGE_STEP_MESSAGES = 8192
#: pauses before an end record the store refused as busy is stored again
_END_RECORD_RETRY_S = (0.05, 0.2, 0.5, 1.0, 2.0)


class HalfMessageEnds:
    """The ends of half messages (event loop); TransactionService adds the check and persistence."""

    def __init__(self, store: MessageStore, state: TransactionState) -> None:
        self._store = store
        self.state = state
        self._ending: dict[int, tuple[asyncio.Future[None], int]] = {}  # half offset -> (end, log offset before)
        self._op_writes: dict[int, int] = {}  # end records being written: their number -> op queue offset before
        self._op_numbers = itertools.count()
        self._half_batches = HalfBatches()
        # the ENDs of one loop step: one read of their half messages, one commit request per real
        # queue, one request of their end records
        self._reads: Coalescer[None, int, dict[str, Any] | None] = Coalescer(self._read_half_messages)
        self._commits: Coalescer[tuple[str, int], StandardMessage, PutResult] = Coalescer(self._put_commits)
        self._end_records: Coalescer[None, StandardMessage, None] = Coalescer(self._put_end_records)

    async def end(self, header: EndTransactionRequestHeader, kind: EndKind) -> str:
        """Commit or roll back the half message the header names; what was done, for the answer.

        Raises ValidationError (SYSTEM_ERROR, as Apache) when the header names no such half message."""
        offset = header.tran_state_table_offset
        while offset in self._ending:  # another end of it is under way: it decides
            await asyncio.shield(self._ending[offset][0])
        ended_already = self._ended_already(offset, kind, header)
        if ended_already is not None:
            return ended_already
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ending[offset] = (done, self._store.commit_log.max_offset)
        try:
            row = await self._half_message(header)
            if kind is EndKind.COMMIT:
                topic, queue_id, message = committed_message(row)
                await self._commits.submit((topic, queue_id), message)
            await self._record_end(offset, kind)
        finally:
            del self._ending[offset]
            done.set_result(None)
        return f"{kind.value} of the half message at offset {offset} stored"

    def remember(self, batch: HalfBatch) -> None:
        """A batch of half messages was stored (ARROW_SEND_HALF_MESSAGE): its range end reads no
        property of its rows."""
        self._half_batches.add(batch)

    async def end_range(
        self,
        header: EndTransactionRangeRequestHeader,
        kind: EndKind,
        permit: Callable[[list[str]], None] | None = None,
    ) -> tuple[int, int]:
        """END_TRANSACTION_RANGE: end the half messages of the header's transaction from its first
        offset on, at most RANGE_REQUEST_MESSAGES offsets of the range (range_end.py); (where to go on,
        how many of them this ended or found ended alike). An end that contradicts a stored one is
        refused (SYSTEM_ERROR), nothing of its step done; `permit` gets the real topics of each step's
        half messages first (ACL: it raises for one the producer may not publish to).

        The steps go in offset order, each step's commits queued once the step before is stored (so
        each real queue gets the rows in their order) while the next step is read and prepared; a
        commit the store refuses (busy) ends the request with its refusal, the ends stored before it
        counted, so the END sent again goes on where this one stopped."""
        last = header.last_offset
        offset = max(header.first_offset, self._store.min_offset(TRANS_HALF_TOPIC, 0))
        budget = min(header.max_messages or RANGE_REQUEST_MESSAGES, RANGE_REQUEST_MESSAGES)
        stop = min(last + 1, offset + budget, self._store.max_offset(TRANS_HALF_TOPIC, 0))
        if offset >= stop:  # nothing stored from there on: the rest of the range is not there
            return max(offset, last + 1) if offset >= self._store.max_offset(TRANS_HALF_TOPIC, 0) else stop, 0
        found = 0
        previous: asyncio.Task[None] | None = None
        finishing: list[asyncio.Task[None]] = []
        try:
            async for step in self._range_steps(header, offset, stop):
                if permit is not None and step.topics:
                    permit(step.topics)
                found += len(step.offsets)
                todo = await self._todo(step.offsets, kind, header.transaction_id)
                if not todo:
                    continue
                rows = step.rows
                if len(todo) < len(step.offsets):
                    rows = rows.filter(pc.is_in(rows.column("queue_offset"), pa.array(todo, pa.int64())))
                done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._ending.update(dict.fromkeys(todo, (done, self._store.commit_log.max_offset)))
                try:
                    runs = step.commits(rows) if kind is EndKind.COMMIT else []
                    if previous is not None:  # the step before is stored: this one's rows come after
                        await asyncio.shield(previous)
                except BaseException:
                    self._forget_ending(todo, done)
                    raise
                previous = asyncio.ensure_future(self._finish_step(runs, todo, kind, done))
                finishing.append(previous)
        finally:
            results = await asyncio.gather(*finishing, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return min(stop, last + 1), found

    async def _range_steps(
        self, header: EndTransactionRangeRequestHeader, offset: int, stop: int
    ) -> AsyncIterator[RangeStep]:
        """The steps of a range end from `offset` to `stop`: the rows of remembered batches of the
        transaction, and of what no remembered batch covers, by their properties."""
        group, transaction_id = header.producer_group, header.transaction_id
        position = offset
        for batch in self._half_batches.between(offset, stop):
            if batch.first > position:
                async for step in self._steps_by_properties(group, transaction_id, position, batch.first):
                    yield step
            start, end = max(batch.first, position), min(batch.end, stop)
            if batch.group == group and batch.transaction_id == transaction_id:
                for piece in range(start, end, RANGE_STEP_MESSAGES):
                    count = min(RANGE_STEP_MESSAGES, end - piece)
                    table, _ = await self._read_table(TRANS_HALF_TOPIC, piece, count)
                    if table is None or table.num_rows != count or table.column("queue_offset")[0].as_py() != piece:
                        async for step in self._steps_by_properties(group, transaction_id, piece, piece + count):
                            yield step  # not all there (deleted files): what is
                        continue
                    yield RangeStep.of_batch(table, batch)
            position = max(position, end)
        if position < stop:
            async for step in self._steps_by_properties(group, transaction_id, position, stop):
                yield step

    async def _steps_by_properties(
        self, group: str, transaction_id: str, offset: int, stop: int
    ) -> AsyncIterator[RangeStep]:
        while offset < stop:
            table, next_offset = await self._read_table(
                TRANS_HALF_TOPIC, offset, min(RANGE_STEP_MESSAGES, stop - offset)
            )
            if table is None:
                return
            yield RangeStep.of_rows(transaction_rows(table, group, transaction_id, stop - 1))
            offset = next_offset

    async def _todo(self, offsets: list[int], kind: EndKind, transaction_id: str) -> list[int]:
        """Those of `offsets` not ended yet, once the ends of them under way are over; refuses (SYSTEM_ERROR)
        when one ended the other way."""
        while busy := [o for o in offsets if o in self._ending]:  # single ends under way decide first
            await asyncio.shield(self._ending[busy[0]][0])
        finals = self.state.final_kinds(offsets)
        refused = next((final for final in finals if final is not None and final is not kind), None)
        if refused is not None:
            raise _refusal(
                f"a half message of transaction {transaction_id} was {_PAST[refused]} already: this "
                f"{kind.value} of its range is not done"
            )
        return [o for o, final in zip(offsets, finals, strict=True) if final is None]

    def _put_commit(self, run: CommitRun) -> asyncio.Future[PutResult]:
        return self._store.put_arrow(
            run.topic,
            run.queue_id,
            run.batch,
            born_timestamp=run.born_timestamp,
            born_host=run.born_host,
            properties=run.properties,
            standard=run.fields,
        )

    async def _finish_step(
        self, runs: list[CommitRun], offsets: list[int], kind: EndKind, done: asyncio.Future[None]
    ) -> None:
        """A step's commits stored, each run's end counted and recorded; the step's offsets are then
        no longer ending. The runs of one real queue are stored one after another: one the store
        refuses (busy) stores none after it, so its queue never holds a later row of the transaction
        before an earlier one, and the ends of those stored count (an END sent again skips them)."""
        try:
            if kind is not EndKind.COMMIT:
                await self._record_end(offsets, kind)
                return
            chains: dict[tuple[str, int], list[CommitRun]] = {}
            for run in runs:
                chains.setdefault((run.topic, run.queue_id), []).append(run)
            results = await asyncio.gather(
                *(self._commit_chain(chain) for chain in chains.values()), return_exceptions=True
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        finally:
            self._forget_ending(offsets, done)

    async def _commit_chain(self, runs: list[CommitRun]) -> None:
        for run in runs:
            await self._put_commit(run)
            await self._record_end(run.half_offsets, EndKind.COMMIT)

    def _forget_ending(self, offsets: list[int], done: asyncio.Future[None]) -> None:
        ending = self._ending
        for half_offset in offsets:
            del ending[half_offset]
        done.set_result(None)

    def _ended_already(self, offset: int, kind: EndKind, header: EndTransactionRequestHeader) -> str | None:
        """The answer to an END of a half message that was committed or rolled back already: the same
        end changes nothing; the other one is refused (SYSTEM_ERROR), as the producer must learn that
        its decision was not the one stored. None when the END is to be done."""
        final = self.state.final_kind(offset)
        if final is None:
            return None
        if final is kind:
            log.info("half message %d ended already; %s from %s ignored", offset, kind.value, header.producer_group)
            return f"the half message at offset {offset} ended already"
        check = " (a check's answer)" if header.from_transaction_check else ""
        group = header.producer_group
        log.warning("half message %d: %s from %s%s refused: %s already", offset, kind.value, group, check, final.value)
        raise _refusal(
            f"the half message at offset {offset} was {_PAST[final]} already (by its producer or a check's "
            f"answer): this {kind.value} is not done"
        )

    async def _half_message(self, header: EndTransactionRequestHeader) -> dict[str, Any]:
        """The stored half message the header names, checked as Apache's checkPrepareMessage does."""
        row = await self._reads.submit(None, header.commit_log_offset)
        if row is None or row["topic"] != TRANS_HALF_TOPIC:
            raise _refusal(f"no half message is stored at commit log offset {header.commit_log_offset}")
        if row["queue_offset"] != header.tran_state_table_offset:
            raise _refusal(
                f"the half message at commit log offset {header.commit_log_offset} has tranStateTableOffset "
                f"{row['queue_offset']}, not {header.tran_state_table_offset}"
            )
        group = props.decode_properties(row["properties"]).get(props.PRODUCER_GROUP)
        if group != header.producer_group:
            raise _refusal(f"the half message belongs to producer group {group}, not {header.producer_group}")
        return row

    # -- helpers -------------------------------------------------------------------------------

    async def _read_table(self, topic: str, offset: int, count: int) -> tuple[pa.Table | None, int]:
        """Up to `count` stored messages of queue 0 of `topic` from `offset` (or the first one kept
        after it) as one table, and the offset after them; None when none is stored from there."""
        while True:
            result = await self._store.get_messages(topic, 0, offset, max_messages=count, max_bytes=STEP_BYTES)
            if result.status is GetStatus.FOUND:
                return pa.Table.from_batches(list(result.batches()), STORED_SCHEMA), result.next_begin_offset
            removed = result.status in (GetStatus.MESSAGE_WAS_REMOVING, GetStatus.OFFSET_TOO_SMALL)
            if not removed or result.next_begin_offset <= offset:
                return None, offset
            offset = result.next_begin_offset

    async def _record_end(self, half_offsets: int | list[int], kind: EndKind) -> None:
        """Count the end of the half message at `half_offsets` (one, or ascending ones of a range end)
        in the state, then store its end record.

        The end is done once a commit is stored (its end record only keeps the check from asking):
        it counts at once, so an END sent again (its producer saw a busy broker's answer) ends
        nothing twice, and an end record the store keeps refusing (SYSTEM_BUSY) is logged, not
        answered as a failure, as Apache's EndTransactionProcessor answers the commit it stored.
        The state, written every second, remembers the end without it."""
        offsets = [half_offsets] if isinstance(half_offsets, int) else half_offsets
        if len(offsets) == 1:
            self.state.end(offsets[0], kind)
        else:
            self.state.end_many(offsets, kind)
        await self._end_records.submit(None, self._end_record(half_offsets, kind))

    async def _read_half_messages(self, _: None, commit_log_offsets: list[int]) -> list[dict[str, Any] | None]:
        return await self._store.messages_at(commit_log_offsets)

    async def _put_commits(self, queue: tuple[str, int], messages: list[StandardMessage]) -> list[PutResult]:
        """Commits of ENDs of one loop step to one real queue, in one request (their order does not
        matter: the ENDs of one producer's queue come one after another)."""
        result = await self._store.put_messages(*queue, messages)
        return [result] * len(messages)

    async def _put_end_records(self, _: None, records: list[StandardMessage]) -> list[None]:
        number = next(self._op_numbers)
        self._op_writes[number] = self._store.max_offset(TRANS_OP_HALF_TOPIC, 0)
        try:
            for pause_s in (*_END_RECORD_RETRY_S, None):
                try:
                    await self._store.put_messages(TRANS_OP_HALF_TOPIC, 0, records)
                except RocketMQError as exc:
                    if exc.code != ResponseCode.SYSTEM_BUSY or pause_s is None:
                        log.warning("%d end records were not stored: %s", len(records), exc)
                        break
                    await asyncio.sleep(pause_s)
                else:
                    break
        finally:
            del self._op_writes[number]
        return [None] * len(records)

    def _end_record(self, half_offsets: int | list[int], kind: EndKind) -> StandardMessage:
        return end_record(half_offsets, kind, self._store.store_host)


_PAST = {EndKind.COMMIT: "committed", EndKind.ROLLBACK: "rolled back", EndKind.DISCARD: "discarded"}


def _refusal(reason: str) -> ValidationError:
    return ValidationError(reason, code=ResponseCode.SYSTEM_ERROR)
