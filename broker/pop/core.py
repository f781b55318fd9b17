"""What the pop engine's receives and acknowledgements share: the state, its journal, waiting
receives, the store's messages, and the few changes both make (finish a message, change a
delivery's invisible time, start a queue's window again, move a message to the dead-letter topic),
each with its journal record; and the mirror of the windows' bases into the consumer offsets,
once the records that moved them are written. Handles are checked here too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from broker.context import HasAddress, HasConfig, HasConsumerOffsets, HasConsumers, HasStore, HasStoreConfig
from broker.pop import records
from broker.pop.errors import PopError, Refusal
from broker.pop.handles import ReceiptHandle
from broker.pop.journal import PopJournal
from broker.pop.queue_state import Delivery, QueueState
from broker.pop.reading import QueueReader
from broker.pop.records import PopTables
from broker.pop.settings import PopSettings
from broker.pop.waiters import PopWaiters
from broker.retry import RetryContext, consumed_again, dead_letter_queue
from broker.store.config import FlushDiskType

log = logging.getLogger(__name__)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class PopContext(
    RetryContext, HasConfig, HasStore, HasStoreConfig, HasAddress, HasConsumerOffsets, HasConsumers, Protocol
):
    """What the pop engine reads of the broker."""


class PopCore:
    def __init__(self, broker: PopContext, clock: Callable[[], int]) -> None:
        self.broker = broker
        self.settings = PopSettings.of(broker.config)
        self.clock = clock
        self.tables = PopTables()
        store_config = broker.store_config
        self.journal = PopJournal(
            store_config.store_path_root_dir / "pop",
            sync=store_config.flush_disk_type is FlushDiskType.SYNC_FLUSH,
            snapshot=self._snapshot,
        )
        self.waiters = PopWaiters(self.settings.max_waiting)
        self.reader = QueueReader(broker.store)
        # push consumers' deliveries, renewed while their client stays: (group, topic, queue id, offset)
        self.renewing: dict[tuple[str, str, int, int], None] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def _snapshot(self, journal: int) -> bytes:
        return self.tables.encode_snapshot(journal)  # the tables of now: loading replaces them

    def lock(self, group: str, topic: str) -> asyncio.Lock:
        """Held while messages of the group's topic are claimed (or one is moved to the dead-letter topic)."""
        return self._locks.setdefault((group, topic), asyncio.Lock())

    def current(self, group: str, topic: str, handle: ReceiptHandle, *, expired_too: bool = False) -> Delivery | None:
        """The delivery a handle names, still current; None when its message was finished already
        (while the handle was not expired yet: the ack of an ack). INVALID_RECEIPT_HANDLE else."""
        state = self.tables.topics.get((group, topic))
        queue = state.queues.get(handle.queue_id) if state is not None else None
        if queue is None:
            raise PopError(
                Refusal.INVALID_RECEIPT_HANDLE,
                f"receipt handle names no message delivered to group {group} from topic {topic}",
            )
        now = self.clock()
        delivery = queue.in_flight.get(handle.offset)
        if delivery is None:
            finished = handle.offset < queue.base or handle.offset in queue.done
            if finished and handle.invisible_until > now:
                return None
            raise PopError(Refusal.INVALID_RECEIPT_HANDLE, "receipt handle is expired: its message is not in flight")
        if delivery.delivery_id != handle.delivery_id:
            raise PopError(
                Refusal.INVALID_RECEIPT_HANDLE,
                "receipt handle is stale: its message was delivered again, or its invisible duration "
                "changed, since; use the latest receipt handle",
            )
        if delivery.invisible_until <= now and not expired_too:
            raise PopError(Refusal.INVALID_RECEIPT_HANDLE, "receipt handle is expired: its invisible time passed")
        return delivery

    def finish(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        queue = self.tables.topics[(group, topic)].queues[queue_id]
        delivery = queue.finish(offset)
        self.journal.append(records.finish_record(group, topic, queue_id, offset, queue.base))
        if delivery is not None and delivery.message_group is not None:
            self.waiters.changed(group, topic)  # the next message of its group may go

    def changed(self, group: str, topic: str, queue_id: int, delivery: Delivery) -> None:
        self.tables.topics[(group, topic)].expect(queue_id, delivery)
        self.journal.append(records.change_record(group, topic, queue_id, delivery))
        self.waiters.changed(group, topic)  # it may be visible sooner than waiting receives expect

    async def dead_letter(self, group: str, row: dict[str, Any], attempts: int) -> None:
        topic, queue_id = dead_letter_queue(self.broker, group)
        await self.broker.store.put_messages(topic, queue_id, [consumed_again(row, self.broker.address, attempts)])
        log.info(
            "message %s of topic %s moved to %s after %d delivery attempts",
            row["msg_id"],
            row["topic"],
            topic,
            attempts,
        )

    async def written(self) -> None:
        try:
            await self.journal.written()
        except OSError as exc:
            raise PopError(Refusal.INTERNAL_SERVER_ERROR, f"could not write the pop journal: {exc}") from exc

    def mirror(self, group: str, topic: str, queue_ids: set[int]) -> None:
        """The consumer offsets of written changes: each queue's base (unless a reset waits to be seen)."""
        state = self.tables.topics.get((group, topic))
        if state is None:
            return
        offsets = self.broker.consumer_offsets
        for queue_id in queue_ids:
            queue = state.queues.get(queue_id)
            if queue is None:
                continue
            current = offsets.query(group, topic, queue_id)
            if current is not None and queue.committed is not None and current != queue.committed:
                continue
            if current != queue.base:
                offsets.commit(group, topic, queue_id, queue.base)
            queue.committed = queue.base

    def reset(self, group: str, topic: str, queue_id: int, queue: QueueState, base: int) -> None:
        queue.reset(base)
        queue.committed = base
        self.journal.append(records.reset_record(group, topic, queue_id, base))

    def mirror_loaded(self, group: str, topic: str, queue_id: int, queue: QueueState) -> None:
        offsets = self.broker.consumer_offsets
        current = offsets.query(group, topic, queue_id)
        if current is not None and current > queue.base:  # set while the broker was down, or a lost tail
            self.reset(group, topic, queue_id, queue, current)
        elif current != queue.base:
            offsets.commit(group, topic, queue_id, queue.base)
        queue.committed = queue.base
