"""`PopService`: pop-style consumption of a consumer group's topic (receive, ack, change invisible
duration, forward to the dead-letter topic), durable across restarts and kill -9.

A receive looks, in this order, at deliveries whose invisible time has passed (delivered again
with the next attempt, or moved to `%DLQ%<group>` once the group's retryMaxTimes + 1 attempts are
used up), at FIFO messages whose message group became free, and at the queues' new messages from
where each queue's window was examined up to, every queue of the topic in turn. Each change is a
journal record (broker/pop/records.py), written before the answer that depends on it; the
group's consumer offsets follow each queue's base once the records that moved it are written.
When something else sets the group's consumer offset (4.x tooling resetting it), the window of
that queue starts again there. New groups start as the 4.x side starts them: at a queue's first
offset while the queue still holds its first message, else at its end.

One receive of a group's topic claims messages at a time (a lock); acks and changes need none:
each checks and changes the state without waiting in between.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from broker.context import HasAddress, HasConfig, HasConsumerOffsets, HasConsumers, HasStore, HasStoreConfig
from broker.managers.consumer_offset_manager import new_group_starts_at_first
from broker.managers.subscription_group_manager import SubscriptionGroupConfig
from broker.pop import records
from broker.pop.errors import PopError, Refusal
from broker.pop.filtering import EVERYTHING, TagFilter
from broker.pop.handles import ReceiptHandle
from broker.pop.journal import PopJournal
from broker.pop.queue_state import Delivery, QueueState, TopicState
from broker.pop.reading import QueueReader, message_group
from broker.pop.records import PopTables
from broker.pop.settings import CLIENT_GONE_GRACE_MS, MAX_BATCH_SIZE, PopSettings
from broker.pop.waiters import PopWaiters
from broker.retry import RetryContext, consumed_again, dead_letter_queue
from broker.store.config import FlushDiskType
from rocketspark.errors import RocketMQError
from rocketspark.protocol.body.topic import Perm, TopicConfig
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)

#: how often push consumers' messages are renewed (or released, once their client left)
RENEW_INTERVAL_S = 1.0
#: receives remembered by attempt id, so a receive tried again gets what the lost answer held
REMEMBERED_ATTEMPTS = 1024


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class PopContext(
    RetryContext, HasConfig, HasStore, HasStoreConfig, HasAddress, HasConsumerOffsets, HasConsumers, Protocol
):
    """What the pop engine reads of the broker."""


@dataclass(frozen=True, slots=True)
class ReceiveRequest:
    group: str
    topic: str
    batch_size: int
    invisible_ms: int = 0  # ignored with auto_renew
    filter: TagFilter = EVERYTHING
    long_polling_ms: int = 0
    auto_renew: bool = False  # a push consumer's receive: renewed while `client_id` stays in the group
    client_id: str = ""
    attempt_id: str | None = None


@dataclass(frozen=True, slots=True)
class Received:
    """A delivered message: its stored row (STORED_SCHEMA), handle, attempt and invisible duration."""

    row: dict[str, Any]
    receipt_handle: str
    delivery_attempt: int
    invisible_ms: int


@dataclass(slots=True)
class _Pop:
    """One receive's claim of messages."""

    request: ReceiveRequest
    state: TopicState
    invisible_ms: int
    wanted: int
    max_attempts: int
    now: int
    found: list[Received]
    touched: set[int]

    @property
    def full(self) -> bool:
        return len(self.found) >= self.wanted


class PopService:
    def __init__(self, broker: PopContext, *, clock: Callable[[], int] = now_ms) -> None:
        self.broker = broker
        self.settings = PopSettings.of(broker.config)
        self._clock = clock
        self.tables = PopTables()
        store_config = broker.store_config
        self.journal = PopJournal(
            store_config.store_path_root_dir / "pop",
            sync=store_config.flush_disk_type is FlushDiskType.SYNC_FLUSH,
            snapshot=self.tables_snapshot,
        )
        self.waiters = PopWaiters(self.settings.max_waiting)
        self._reader = QueueReader(broker.store)
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._renewing: dict[tuple[str, str, int, int], None] = {}
        self._attempts: OrderedDict[tuple[str, str, str], list[tuple[int, int, int]]] = OrderedDict()
        self._loaded_at = 0
        self._services = [PeriodicService("pop-renew", RENEW_INTERVAL_S, self.renew)]
        if store_config.flush_disk_type is FlushDiskType.ASYNC_FLUSH:
            self._services.append(
                PeriodicService("pop-journal-flush", store_config.flush_interval_commit_log / 1000, self.journal.flush)
            )
        self.running = False

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the state the store directory holds and mirror it into the consumer offsets."""
        self.tables = await self.journal.load()
        self._loaded_at = self._clock()
        for (group, topic), state in self.tables.topics.items():
            for queue_id, queue in state.queues.items():
                for delivery in queue.in_flight.values():
                    if delivery.renew_client is not None:
                        self._renewing[(group, topic, queue_id, delivery.offset)] = None
                self._mirror_loaded(group, topic, queue_id, queue)
        self.broker.store.add_arrival_listener(self.waiters.arrived)
        for service in self._services:
            service.start()
        self.running = True

    async def stop(self) -> None:
        """Write what is pending and a snapshot of everything, for a quick start."""
        if not self.running:
            return
        self.running = False
        for service in self._services:
            await service.stop()
        await self.journal.close(self.tables_snapshot)

    def tables_snapshot(self, journal: int) -> bytes:
        return self.tables.encode_snapshot(journal)

    def _mirror_loaded(self, group: str, topic: str, queue_id: int, queue: QueueState) -> None:
        offsets = self.broker.consumer_offsets
        current = offsets.query(group, topic, queue_id)
        if current is not None and current > queue.base:  # set while the broker was down, or a lost tail
            self._reset(group, topic, queue_id, queue, current)
        elif current != queue.base:
            offsets.commit(group, topic, queue_id, queue.base)
        queue.committed = queue.base

    # -- receiving -----------------------------------------------------------------------------

    async def receive(self, request: ReceiveRequest) -> list[Received]:
        """Up to `batch_size` messages, waiting up to `long_polling_ms` for the first ones."""
        config, topic_config = self._check(request.group, request.topic)
        settings = self.settings
        if request.auto_renew:
            invisible = settings.renew_slice_ms
        elif not settings.min_invisible_ms <= request.invisible_ms <= settings.max_invisible_ms:
            raise PopError(
                Refusal.ILLEGAL_INVISIBLE_TIME,
                f"the invisible duration must be within {settings.min_invisible_ms} ms and "
                f"{settings.max_invisible_ms} ms (minInvisibleTimeMillsForRecv, maxInvisibleTimeMills), "
                f"got {request.invisible_ms} ms",
            )
        else:
            invisible = request.invisible_ms
        if request.batch_size <= 0:
            raise PopError(Refusal.BAD_REQUEST, f"batch_size must be positive, got {request.batch_size}")
        wanted = min(request.batch_size, MAX_BATCH_SIZE)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(request.long_polling_ms, 0), settings.max_long_polling_ms) / 1000
        key = (request.group, request.topic)
        while True:
            found = await self._pop(request, topic_config, invisible, wanted, config.retry_max_times + 1)
            remaining = deadline - loop.time()
            if found or remaining <= 0:
                return found
            expiry = self.tables.topics[key].next_expiry()
            if expiry is not None:
                remaining = min(remaining, max(expiry - self._clock(), 0) / 1000 + 0.001)
            await self.waiters.wait(request.group, request.topic, request.filter.codes, remaining)

    def _check(self, group: str, topic: str) -> tuple[SubscriptionGroupConfig, TopicConfig]:
        broker = self.broker
        config = broker.subscription_groups.find(group)
        if config is None:
            raise PopError(
                Refusal.CONSUMER_GROUP_NOT_FOUND,
                f"consumer group {group} does not exist: create it first (autoCreateSubscriptionGroup=false)",
            )
        if not config.consume_enable:
            raise PopError(Refusal.FORBIDDEN, f"consumer group {group} may not consume (consumeEnable=false)")
        topic_config = broker.topics.get(topic)
        if topic_config is None:
            raise PopError(Refusal.TOPIC_NOT_FOUND, f"topic {topic} does not exist: create it first")
        if not topic_config.perm & Perm.READ:
            raise PopError(Refusal.FORBIDDEN, f"topic {topic} is not readable (its perm forbids reads)")
        return config, topic_config

    async def _pop(
        self, request: ReceiveRequest, topic: TopicConfig, invisible: int, wanted: int, max_attempts: int
    ) -> list[Received]:
        key = (request.group, request.topic)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            state = self.tables.topics.setdefault(key, TopicState())
            pop = _Pop(request, state, invisible, wanted, max_attempts, self._clock(), [], set())
            if request.attempt_id is not None:
                await self._repeat_attempt(pop)
            if not pop.found:
                await self._redeliver_expired(pop)
                count = topic.read_queue_nums
                for i in range(count):
                    if pop.full:
                        break
                    await self._pop_queue(pop, (state.next_queue + i) % count)
                state.next_queue = (state.next_queue + 1) % max(count, 1)
        await self._written()
        self._mirror(request.group, request.topic, pop.touched)
        if request.attempt_id is not None and pop.found:
            self._remember_attempt(request, pop)
        return pop.found

    async def _repeat_attempt(self, pop: _Pop) -> None:
        """A receive tried again (same attempt id): what the first try delivered and is still invisible."""
        request = pop.request
        earlier = self._attempts.get((request.group, request.topic, request.attempt_id or ""), [])
        for queue_id, offset, delivery_id in earlier:
            delivery = pop.state.current(queue_id, offset, delivery_id)
            if delivery is None or delivery.invisible_until <= pop.now:
                continue
            row = await self._reader.row(request.topic, offset, delivery.commit_log_offset)
            if row is not None and pop.state.current(queue_id, offset, delivery_id) is delivery:
                handle = ReceiptHandle(queue_id, offset, delivery_id, delivery.invisible_until)
                pop.found.append(Received(row, handle.encode(), delivery.attempt, delivery.invisible_until - pop.now))

    def _remember_attempt(self, request: ReceiveRequest, pop: _Pop) -> None:
        key = (request.group, request.topic, request.attempt_id or "")
        self._attempts[key] = [
            (handle.queue_id, handle.offset, handle.delivery_id)
            for handle in (ReceiptHandle.decode(r.receipt_handle) for r in pop.found)
        ]
        self._attempts.move_to_end(key)
        while len(self._attempts) > REMEMBERED_ATTEMPTS:
            self._attempts.popitem(last=False)

    async def _redeliver_expired(self, pop: _Pop) -> None:
        request, state = pop.request, pop.state
        expired = state.expired(pop.now)
        while not pop.full:
            item = next(expired, None)
            if item is None:
                return
            queue_id, delivery = item
            row = await self._reader.row(request.topic, delivery.offset, delivery.commit_log_offset)
            if state.current(queue_id, delivery.offset, delivery.delivery_id) is not delivery:
                continue  # acknowledged meanwhile
            if row is None:
                log.warning(
                    "message %s:%d:%d of group %s is no longer stored; it is not delivered again",
                    request.topic,
                    queue_id,
                    delivery.offset,
                    request.group,
                )
                self._finish(request.group, request.topic, queue_id, delivery.offset)
            elif delivery.attempt >= pop.max_attempts:
                try:
                    await self._dead_letter(request.group, row, delivery.attempt)
                except RocketMQError as exc:
                    log.warning("could not move a message of group %s to its dead-letter topic: %s", request.group, exc)
                    state.expect(queue_id, delivery)  # the next receive tries again
                    continue
                self._finish(request.group, request.topic, queue_id, delivery.offset)
            elif not request.filter.accepts(row["tags"]):
                self._finish(request.group, request.topic, queue_id, delivery.offset)
            else:
                self._deliver(pop, queue_id, row, delivery.message_group, delivery.attempt + 1)
            pop.touched.add(queue_id)

    async def _pop_queue(self, pop: _Pop, queue_id: int) -> None:
        request = pop.request
        queue = self._queue(pop, queue_id)
        base = queue.base
        for group in queue.ready_groups():  # FIFO messages whose message group is free again
            while not pop.full and group in queue.held and group not in queue.busy:
                offset, commit_log_offset = queue.take_held(group)
                row = await self._reader.row(request.topic, offset, commit_log_offset)
                if row is None:
                    queue.finish(offset)  # removed meanwhile
                else:
                    self._deliver(pop, queue_id, row, group, 1)
        if not pop.full:
            restart = await self._reader.examine(
                request.topic,
                queue_id,
                queue,
                request.filter.codes,
                lambda: pop.wanted - len(pop.found),
                lambda row: self._examined(pop, queue_id, queue, row),
            )
            if restart is not None:
                log.warning(
                    "queue %s:%d no longer holds what group %s was consuming; its deliveries start again at %d",
                    request.topic,
                    queue_id,
                    request.group,
                    restart,
                )
                self._reset(request.group, request.topic, queue_id, queue, restart)
        if queue.base != base:
            self.journal.append(records.base_record(request.group, request.topic, queue_id, queue.base))
            pop.touched.add(queue_id)

    def _examined(self, pop: _Pop, queue_id: int, queue: QueueState, row: dict[str, Any]) -> None:
        """A new message of the queue (at or above its base, not seen before): finish, hold or deliver it."""
        offset = int(row["queue_offset"])
        if not pop.request.filter.accepts(row["tags"]):
            queue.finish(offset)
            return
        group = message_group(row)
        if group is not None and queue.waits(group):
            queue.hold(group, offset, int(row["commit_log_offset"]))
            return
        self._deliver(pop, queue_id, row, group, 1)

    def _deliver(self, pop: _Pop, queue_id: int, row: dict[str, Any], group: str | None, attempt: int) -> None:
        request = pop.request
        offset = int(row["queue_offset"])
        renew = request.auto_renew
        delivery = Delivery(
            offset,
            int(row["commit_log_offset"]),
            self.tables.take_delivery_id(),
            attempt,
            pop.now + pop.invisible_ms,
            group,
            request.client_id if renew else None,
            pop.now + self.settings.renew_max_ms if renew else 0,
        )
        pop.state.deliver(queue_id, delivery)
        queue = pop.state.queues[queue_id]
        self.journal.append(records.deliver_record(request.group, request.topic, queue_id, delivery, queue.base))
        if renew:
            self._renewing[(request.group, request.topic, queue_id, offset)] = None
        handle = ReceiptHandle(queue_id, offset, delivery.delivery_id, delivery.invisible_until)
        pop.found.append(Received(row, handle.encode(), attempt, pop.invisible_ms))
        pop.touched.add(queue_id)

    def _queue(self, pop: _Pop, queue_id: int) -> QueueState:
        """The group's window of a queue: made where a new group starts, or started again where
        the group's consumer offset was set to."""
        group, topic = pop.request.group, pop.request.topic
        current = self.broker.consumer_offsets.query(group, topic, queue_id)
        queue = pop.state.queues.get(queue_id)
        if queue is None:
            store = self.broker.store
            if current is not None:
                base = current
            elif new_group_starts_at_first(store.min_offset(topic, queue_id)):
                base = 0
            else:
                base = store.max_offset(topic, queue_id)
            queue = self.tables.queue(group, topic, queue_id, base)
            queue.committed = current
            self.journal.append(records.base_record(group, topic, queue_id, base))
            pop.touched.add(queue_id)
        elif current is not None and queue.committed is not None and current != queue.committed:
            log.info(
                "consumer offset of group %s for %s:%d was set to %d: its 5.x deliveries start there",
                group,
                topic,
                queue_id,
                current,
            )
            self._reset(group, topic, queue_id, queue, current)
            pop.touched.add(queue_id)
        return queue

    def _reset(self, group: str, topic: str, queue_id: int, queue: QueueState, base: int) -> None:
        queue.reset(base)
        queue.committed = base
        self.journal.append(records.reset_record(group, topic, queue_id, base))

    # -- acknowledging -------------------------------------------------------------------------

    async def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        """Finish the message a handle names (a handle of a message acknowledged already: no-op)."""
        handle = ReceiptHandle.decode(receipt_handle)
        if self._current(group, topic, handle) is not None:
            self._finish(group, topic, handle.queue_id, handle.offset)
        await self._written()
        self._mirror(group, topic, {handle.queue_id})

    async def change_invisible_duration(self, group: str, topic: str, receipt_handle: str, invisible_ms: int) -> str:
        """Make the message visible again `invisible_ms` from now; the new handle (the old one is stale)."""
        if not 0 <= invisible_ms <= self.settings.max_invisible_ms:
            raise PopError(
                Refusal.ILLEGAL_INVISIBLE_TIME,
                f"the invisible duration must be within 0 and {self.settings.max_invisible_ms} ms "
                f"(maxInvisibleTimeMills), got {invisible_ms} ms",
            )
        handle = ReceiptHandle.decode(receipt_handle)
        delivery = self._current(group, topic, handle)
        if delivery is None:
            raise PopError(Refusal.INVALID_RECEIPT_HANDLE, "the message was acknowledged already")
        delivery.delivery_id = self.tables.take_delivery_id()
        delivery.invisible_until = self._clock() + invisible_ms
        delivery.renew_client = None  # a push consumer's nack: no more renewals
        self._changed(group, topic, handle.queue_id, delivery)
        await self._written()
        return ReceiptHandle(handle.queue_id, handle.offset, delivery.delivery_id, delivery.invisible_until).encode()

    async def forward_to_dead_letter(self, group: str, topic: str, receipt_handle: str) -> None:
        """Move the message a handle names to the group's dead-letter topic (a FIFO consumer gave up)."""
        handle = ReceiptHandle.decode(receipt_handle)
        async with self._locks.setdefault((group, topic), asyncio.Lock()):  # no redelivery meanwhile
            delivery = self._current(group, topic, handle, expired_too=True)
            if delivery is None:
                return
            row = await self._reader.row(topic, delivery.offset, delivery.commit_log_offset)
            if row is not None:
                await self._dead_letter(group, row, delivery.attempt)
            if self.tables.topics[(group, topic)].current(handle.queue_id, handle.offset, handle.delivery_id):
                self._finish(group, topic, handle.queue_id, handle.offset)
        await self._written()
        self._mirror(group, topic, {handle.queue_id})

    def _current(self, group: str, topic: str, handle: ReceiptHandle, *, expired_too: bool = False) -> Delivery | None:
        """The delivery a handle names, still current; None when its message was finished already
        (while the handle was not expired yet: the ack of an ack). INVALID_RECEIPT_HANDLE else."""
        state = self.tables.topics.get((group, topic))
        queue = state.queues.get(handle.queue_id) if state is not None else None
        if queue is None:
            raise PopError(
                Refusal.INVALID_RECEIPT_HANDLE,
                f"receipt handle names no message delivered to group {group} from topic {topic}",
            )
        now = self._clock()
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

    def _finish(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        queue = self.tables.topics[(group, topic)].queues[queue_id]
        delivery = queue.finish(offset)
        self.journal.append(records.finish_record(group, topic, queue_id, offset, queue.base))
        if delivery is not None and delivery.message_group is not None:
            self.waiters.changed(group, topic)  # the next message of its group may go

    def _changed(self, group: str, topic: str, queue_id: int, delivery: Delivery) -> None:
        self.tables.topics[(group, topic)].expect(queue_id, delivery)
        self.journal.append(records.change_record(group, topic, queue_id, delivery))
        self.waiters.changed(group, topic)  # it may be visible sooner than waiting receives expect

    async def _dead_letter(self, group: str, row: dict[str, Any], attempts: int) -> None:
        topic, queue_id = dead_letter_queue(self.broker, group)
        await self.broker.store.put_messages(topic, queue_id, [consumed_again(row, self.broker.address, attempts)])
        log.info(
            "message %s of topic %s moved to %s after %d delivery attempts",
            row["msg_id"],
            row["topic"],
            topic,
            attempts,
        )

    async def _written(self) -> None:
        try:
            await self.journal.written()
        except OSError as exc:
            raise PopError(Refusal.INTERNAL_SERVER_ERROR, f"could not write the pop journal: {exc}") from exc

    def _mirror(self, group: str, topic: str, queue_ids: set[int]) -> None:
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

    # -- renewal -------------------------------------------------------------------------------

    def renew(self) -> None:
        """Keep push consumers' messages invisible while their client stays in the group; release
        those of clients that left."""
        now, settings = self._clock(), self.settings
        members: dict[str, set[str]] = {}
        for key in list(self._renewing):
            group, topic, queue_id, offset = key
            state = self.tables.topics.get((group, topic))
            queue = state.queues.get(queue_id) if state is not None else None
            delivery = queue.in_flight.get(offset) if queue is not None else None
            if state is None or delivery is None or delivery.renew_client is None:
                del self._renewing[key]
                continue
            if group not in members:
                info = self.broker.consumers.groups.get(group)
                members[group] = set(info.client_ids()) if info is not None else set()
            since = max(delivery.renew_deadline - settings.renew_max_ms, self._loaded_at)
            if delivery.renew_client not in members[group] and now - since > CLIENT_GONE_GRACE_MS:
                delivery.renew_client = None
                delivery.invisible_until = min(delivery.invisible_until, now + settings.clear_ms)
            elif now >= delivery.renew_deadline:
                delivery.renew_client = None  # renewed long enough (renewMaxTimeMillis)
            elif delivery.invisible_until - now <= settings.renew_ahead_ms:
                delivery.invisible_until = min(now + settings.renew_slice_ms, delivery.renew_deadline)
            else:
                continue
            if delivery.renew_client is None:
                del self._renewing[key]
            self._changed(group, topic, queue_id, delivery)
