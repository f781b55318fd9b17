"""One long-polling pull loop per owned queue, with the push consumer's flow control.

As Java's PullMessageService and `DefaultMQPushConsumerImpl.pullMessage`: a pull asks for at most
`pull_batch_size` messages and the broker holds it `broker_suspend_max_time_ms` when there are
none; pulling a queue pauses while its process queue holds `pull_threshold_for_queue` messages or
`pull_threshold_size_for_queue` MiB of bodies (or, concurrent mode, spans more than
`consume_concurrently_max_span` offsets), and an orderly clustering queue is pulled only while locked.
A pull never asks for more messages than the count threshold leaves room for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from rocketspark.client.api.pull import PullStatus
from rocketspark.client.offset_store import OffsetStore
from rocketspark.client.puller import QueuePuller
from rocketspark.client.push.options import PushOptions
from rocketspark.client.push.process_queue import ProcessQueue
from rocketspark.errors import RocketMQError
from rocketspark.message.message import MessageExt
from rocketspark.remoting.body.heartbeat import MessageModel

log = logging.getLogger(__name__)

#: the pause while flow control holds a queue (Java's PULL_TIME_DELAY_MILLS_WHEN_CACHE_FLOW_CONTROL)
FLOW_CONTROL_DELAY_S = 0.05

Dispatch = Callable[[ProcessQueue, list[MessageExt]], None]


def _report_failure(task: asyncio.Task[None]) -> None:
    """A pull loop ends only when cancelled; anything else is a bug worth a loud log."""
    if not task.cancelled() and task.exception() is not None:
        log.error("%s stopped by an unexpected error", task.get_name(), exc_info=task.exception())


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
        task = asyncio.get_running_loop().create_task(self._loop(pq, offset), name=f"push pull {pq.queue}")
        task.add_done_callback(_report_failure)
        self._tasks[pq] = task

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
        options = self.options
        queue = pq.queue
        clustering = options.message_model is MessageModel.CLUSTERING
        failing = False
        while not pq.dropped:
            if self.needs_lock and not pq.lock_valid():
                await asyncio.sleep(options.pull_delay_on_error_ms / 1000)  # the lock service renews it
                continue
            if self._held_back(pq):
                await asyncio.sleep(FLOW_CONTROL_DELAY_S)
                continue
            commit = self.store.table.get(queue) if clustering else None
            try:
                result = await self.puller.pull_messages(
                    queue,
                    offset,
                    max_messages=min(options.pull_batch_size, options.pull_threshold_for_queue - pq.count),
                    expression=self.expression(queue.topic),
                    suspend_ms=options.broker_suspend_max_time_ms,
                    commit_offset=commit,
                    timeout_s=options.consumer_timeout_ms_when_suspend / 1000,
                )
            except RocketMQError as exc:
                if not failing:
                    log.warning(
                        "pulling %s failed (retrying every %.1f s): %s",
                        queue,
                        options.pull_delay_on_error_ms / 1000,
                        exc,
                    )
                    failing = True
                await asyncio.sleep(options.pull_delay_on_error_ms / 1000)
                continue
            failing = False
            if pq.dropped:
                return
            if result.status is PullStatus.OFFSET_ILLEGAL:
                log.warning(
                    "offset %d of %s is no longer valid (queue holds %d..%d); continuing at %d",
                    offset,
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
            offset = result.next_begin_offset
