"""Orderly consumption: each queue's messages in offset order, one batch of one queue in the
listener at a time (as Java's ConsumeMessageOrderlyService).

One worker task per owned queue takes the next `consume_message_batch_max_size` messages, runs the
listener on a pool thread and waits for it, so different queues are consumed in parallel and one
queue never is. In clustering the queue must hold a valid broker lock; a batch answered
SUSPEND_CURRENT_QUEUE_A_MOMENT (or raising) goes back to the front of its queue and is retried
after `suspend_current_queue_time_ms`, its messages' `reconsume_times` raised by one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rocketspark.aio import finish_or_cancel
from rocketspark.client.consumer.offset_store import OffsetStore
from rocketspark.client.consumer.push.listeners import ConsumeOrderlyStatus, OrderlyListener, invoke
from rocketspark.client.consumer.push.options import PushOptions
from rocketspark.client.consumer.push.process_queue import ProcessQueue
from rocketspark.message.message import MessageExt
from rocketspark.protocol.body.heartbeat import MessageModel

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Worker:
    task: asyncio.Task[None] | None = None
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    in_listener: bool = False


class OrderlyConsumeService:
    def __init__(
        self,
        listener: OrderlyListener,
        executor: concurrent.futures.Executor,
        store: OffsetStore,
        options: PushOptions,
        group: str,
        relock: Callable[[ProcessQueue], Awaitable[bool]],
    ) -> None:
        self.listener = listener
        self.executor = executor
        self.store = store
        self.options = options
        self.group = group
        self.relock = relock  # lock one queue again now; True when held
        self.needs_lock = options.message_model is MessageModel.CLUSTERING
        self._workers: dict[ProcessQueue, _Worker] = {}

    def submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        worker = self._workers.get(pq)
        if worker is None:
            worker = self._workers[pq] = _Worker()
            worker.task = asyncio.get_running_loop().create_task(self._run(pq, worker), name=f"orderly {pq.queue}")
        worker.wakeup.set()

    def _call(self, pq: ProcessQueue, batch: list[MessageExt]) -> ConsumeOrderlyStatus | None:
        """In a pool thread: None when the queue was dropped before the batch's turn came."""
        if pq.dropped:
            return None
        return invoke(
            self.listener,
            batch,
            group=self.group,
            queue=pq.queue,
            failed=ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT,
        )

    async def _run(self, pq: ProcessQueue, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        pause_s = self.options.suspend_current_queue_time_ms / 1000
        while not pq.dropped:
            await worker.wakeup.wait()
            worker.wakeup.clear()
            while not pq.dropped and pq.count:
                if self.needs_lock and not pq.lock_valid() and not await self.relock(pq):
                    await asyncio.sleep(pause_s)
                    continue
                batch = pq.take(self.options.consume_message_batch_max_size)
                if not batch:
                    break
                worker.in_listener = True
                try:
                    status = await loop.run_in_executor(self.executor, self._call, pq, batch)
                finally:
                    worker.in_listener = False
                if status is ConsumeOrderlyStatus.SUCCESS:
                    offset = pq.commit()
                    if offset is not None and not pq.removed:
                        self.store.update_offset(pq.queue, offset)
                    continue
                pq.give_back()
                if status is None:
                    return
                for message in batch:
                    message.reconsume_times += 1
                await asyncio.sleep(pause_s)

    async def drain(self, queues: list[ProcessQueue], timeout_s: float) -> dict[ProcessQueue, asyncio.Task[None]]:
        """Stop the workers of dropped `queues`, waiting for a batch in the listener at most `timeout_s`.

        In clustering the workers still in the listener then are returned, not cancelled: their
        queues stay locked until the listener returns (as Java, which does not unlock a queue whose
        consume lock is held), since another member would consume them meanwhile. Without broker
        locks nothing guards the order across members, and such workers are cancelled.
        """
        tasks: dict[ProcessQueue, asyncio.Task[None]] = {}
        for pq in queues:
            worker = self._workers.pop(pq, None)
            if worker is not None and worker.task is not None:
                tasks[pq] = worker.task
                if not worker.in_listener:
                    worker.task.cancel()
        if tasks:
            await asyncio.wait(tasks.values(), timeout=timeout_s)
        busy = {pq: task for pq, task in tasks.items() if not task.done()}
        if busy and self.needs_lock:
            log.warning(
                "group %s: the listener still holds a batch of %s after %.0f s; the queue(s) stay locked "
                "until it returns",
                self.group,
                ", ".join(str(pq.queue) for pq in busy),
                timeout_s,
            )
            return busy
        cancelled = await finish_or_cancel(list(busy.values()), 0)
        if cancelled:
            log.warning(
                "group %s: %d orderly batch(es) of dropped queues still in the listener after %.0f s; "
                "their messages will be consumed again",
                self.group,
                cancelled,
                timeout_s,
            )
        return {}
