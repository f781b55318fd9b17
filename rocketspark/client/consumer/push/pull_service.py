"""One long-polling pull loop per owned queue, with the push consumer's flow control.

As Java's PullMessageService and `DefaultMQPushConsumerImpl.pullMessage`: a pull asks for at most
`pull_batch_size` messages and the broker holds it `broker_suspend_max_time_ms` when there are
none; pulling a queue pauses while its process queue holds `pull_threshold_for_queue` messages or
`pull_threshold_size_for_queue` MiB of bodies (or, concurrent mode, spans more than
`consume_concurrently_max_span` offsets), and an orderly clustering queue is pulled only while locked.
A pull never asks for more messages than the count threshold leaves room for.

A loop ends only when its queue is dropped: a failed pull, whatever the error, is logged and
retried after `pull_delay_on_error_ms`. A record the client cannot decode would fail every retry,
so it is skipped instead, logged as an error with its offset (Java's client drops the rest of such
a pull without a word).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from rocketspark.client.api.pull import PullStatus
from rocketspark.client.consumer.offset_store import OffsetStore
from rocketspark.client.consumer.puller import QueuePuller
from rocketspark.client.consumer.push.options import PushOptions
from rocketspark.client.consumer.push.process_queue import ProcessQueue
from rocketspark.client.consumer.undecodable import OneByOne
from rocketspark.errors import DecodeError, RocketMQError
from rocketspark.message.message import MessageExt
from rocketspark.protocol.body.heartbeat import MessageModel

log = logging.getLogger(__name__)

#: the pause while flow control holds a queue (Java's PULL_TIME_DELAY_MILLS_WHEN_CACHE_FLOW_CONTROL)
FLOW_CONTROL_DELAY_S = 0.05

Dispatch = Callable[[ProcessQueue, list[MessageExt]], None]


@dataclass(slots=True)
class _Cursor:
    """Where one queue's pull loop stands."""

    offset: int  # the next offset to pull
    one_by_one: OneByOne = field(default_factory=OneByOne)


class PullService:
    def __init__(
        self,
        puller: QueuePuller,
        store: OffsetStore,
        options: PushOptions,
        *,
        expression: Callable[[str], str],
        dispatch: Dispatch,
        orderly: bool,
    ) -> None:
        self.puller = puller
        self.store = store
        self.options = options
        self.expression = expression
        self.dispatch = dispatch
        self.needs_lock = orderly and options.message_model is MessageModel.CLUSTERING
        self.span_limited = not orderly
        self._tasks: dict[ProcessQueue, asyncio.Task[None]] = {}

    def start(self, pq: ProcessQueue, offset: int) -> None:
        self._tasks[pq] = asyncio.get_running_loop().create_task(self._loop(pq, offset), name=f"push pull {pq.queue}")

    async def stop(self, pq: ProcessQueue) -> None:
        task = self._tasks.pop(pq, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _held_back(self, pq: ProcessQueue) -> bool:
        options = self.options
        return (
            pq.count >= options.pull_threshold_for_queue
            or pq.size >= options.pull_threshold_size_for_queue * 1024 * 1024
            or (self.span_limited and pq.span > options.consume_concurrently_max_span)
        )

    async def _loop(self, pq: ProcessQueue, offset: int) -> None:
        """Pull until the queue is dropped; any failure is logged (once per run of failures) and retried."""
        delay_s = self.options.pull_delay_on_error_ms / 1000
        cursor = _Cursor(offset)
        failing = False
        while not pq.dropped:
            try:
                await self._step(pq, cursor)
            except RocketMQError as exc:
                if not failing:
                    log.warning("pulling %s failed (retrying every %.1f s): %s", pq.queue, delay_s, exc)
            except Exception:
                if not failing:
                    log.exception("pulling %s failed unexpectedly (retrying every %.1f s)", pq.queue, delay_s)
            else:
                failing = False
                continue
            failing = True
            await asyncio.sleep(delay_s)

    async def _step(self, pq: ProcessQueue, cursor: _Cursor) -> None:
        """One pull of `pq` (or one pause of flow control), moving `cursor` on."""
        options = self.options
        queue = pq.queue
        if self.needs_lock and not pq.lock_valid():
            await asyncio.sleep(options.pull_delay_on_error_ms / 1000)  # the lock service renews it
            return
        if self._held_back(pq):
            await asyncio.sleep(FLOW_CONTROL_DELAY_S)
            return
        wanted = cursor.one_by_one.pull_size(
            cursor.offset, min(options.pull_batch_size, options.pull_threshold_for_queue - pq.count)
        )
        try:
            result = await self.puller.pull_messages(
                queue,
                cursor.offset,
                max_messages=wanted,
                expression=self.expression(queue.topic),
                suspend_ms=options.broker_suspend_max_time_ms,
                commit_offset=self.store.table.get(queue) if options.message_model is MessageModel.CLUSTERING else None,
                timeout_s=options.consumer_timeout_ms_when_suspend / 1000,
            )
        except DecodeError as exc:
            if not pq.dropped:
                self._undecodable(pq, cursor, wanted, exc)
            return
        if pq.dropped:
            return
        if result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "offset %d of %s is no longer valid (queue holds %d..%d); continuing at %d",
                cursor.offset,
                queue,
                result.min_offset,
                result.max_offset,
                result.next_begin_offset,
            )
        if result.messages:
            pq.put(result.messages)
            self.dispatch(pq, result.messages)
        elif pq.count == 0:  # nothing in flight: what was skipped (filtered out, moved) counts as consumed
            self.store.update_offset(
                queue, result.next_begin_offset, increase_only=result.status is not PullStatus.OFFSET_ILLEGAL
            )
        cursor.offset = result.next_begin_offset

    def _undecodable(self, pq: ProcessQueue, cursor: _Cursor, wanted: int, error: DecodeError) -> None:
        """A pull answered records the client cannot decode: find the bad one and skip it."""
        if cursor.one_by_one.skips(pq.queue, cursor.offset, wanted, error):
            cursor.offset += 1
            if pq.count == 0:  # nothing in flight: the skipped message counts as consumed
                self.store.update_offset(pq.queue, cursor.offset)
