"""Concurrent consumption: batches of up to `consume_message_batch_max_size` messages, any queue,
any order, over the consume thread pool (as Java's ConsumeMessageConcurrentlyService).

The messages of a batch the listener answers RECONSUME_LATER (or raises on) go back to the broker in
clustering mode (rocketspark/client/consumer/push/send_back.py), which redelivers them later through the
group's retry topic. A message nothing took back, and every message in broadcasting mode, stays in
its process queue and goes to the listener again after `reconsume_later_delay_ms`, its
`reconsume_times` raised by one. A message is committed once consumed or sent back; the queue's
committed offset is the smallest offset still in flight.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging

from rocketspark.aio import finish_or_cancel
from rocketspark.client.consumer.offset_store import OffsetStore
from rocketspark.client.consumer.push.listeners import ConcurrentListener, ConsumeStatus, invoke
from rocketspark.client.consumer.push.options import PushOptions
from rocketspark.client.consumer.push.process_queue import ProcessQueue
from rocketspark.client.consumer.push.send_back import MessageReturner
from rocketspark.message.message import MessageExt

log = logging.getLogger(__name__)


class ConcurrentConsumeService:
    def __init__(
        self,
        listener: ConcurrentListener,
        executor: concurrent.futures.Executor,
        store: OffsetStore,
        options: PushOptions,
        group: str,
        returner: MessageReturner | None,
    ) -> None:
        """`returner`: where failed messages go back to (clustering); None retries them here."""
        self.listener = listener
        self.returner = returner
        self.executor = executor
        self.store = store
        self.options = options
        self.group = group
        self._tasks: dict[ProcessQueue, set[asyncio.Task[None]]] = {}
        self._pausing: set[asyncio.Task[None]] = set()  # waiting to retry, not in the listener

    def submit(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        loop = asyncio.get_running_loop()
        size = self.options.consume_message_batch_max_size
        tasks = self._tasks.setdefault(pq, set())
        for start in range(0, len(messages), size):
            task = loop.create_task(self._consume(pq, messages[start : start + size]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    def _call(self, pq: ProcessQueue, batch: list[MessageExt]) -> ConsumeStatus | None:
        """In a pool thread: None when the queue was dropped before the batch's turn came."""
        if pq.dropped:
            return None
        return invoke(self.listener, batch, group=self.group, queue=pq.queue, failed=ConsumeStatus.RECONSUME_LATER)

    async def _consume(self, pq: ProcessQueue, batch: list[MessageExt]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            status = await loop.run_in_executor(self.executor, self._call, pq, batch)
            if status is None:
                return
            if status is ConsumeStatus.CONSUME_SUCCESS:
                self._done(pq, batch)
                return
            if self.returner is not None:
                returned = [await self.returner.return_message(pq.queue.broker_name, message) for message in batch]
                self._done(pq, [m for m, ok in zip(batch, returned, strict=True) if ok])
                batch = [m for m, ok in zip(batch, returned, strict=True) if not ok]
                if not batch:
                    return
            for message in batch:
                message.reconsume_times += 1
            task = asyncio.current_task()
            assert task is not None
            self._pausing.add(task)
            try:
                await asyncio.sleep(self.options.reconsume_later_delay_ms / 1000)
            finally:
                self._pausing.discard(task)
            if pq.dropped:
                return

    def _done(self, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        """Forget consumed (or sent back) messages and commit what the queue allows now."""
        if not messages:
            return
        offset = pq.remove(messages)
        if offset is not None and not pq.removed:
            self.store.update_offset(pq.queue, offset)

    async def drain(self, queues: list[ProcessQueue], timeout_s: float) -> dict[ProcessQueue, asyncio.Task[None]]:
        """Wait for the batches of dropped `queues` in the listener (at most `timeout_s`); the rest stop.

        Returns no queue to keep locked: concurrent consumption has no order to guard.
        """
        tasks: set[asyncio.Task[None]] = set()
        for pq in queues:
            tasks.update(self._tasks.pop(pq, ()))
        for task in tasks & self._pausing:
            task.cancel()
        cancelled = await finish_or_cancel(tasks, timeout_s)
        if cancelled:
            log.warning(
                "group %s: %d batch(es) of dropped queues still in the listener after %.0f s; "
                "their messages will be consumed again",
                self.group,
                cancelled,
                timeout_s,
            )
        return {}
