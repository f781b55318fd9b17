"""Receives: which messages a receive of a consumer group's topic gets, and when it has waited enough.

A receive looks, in this order, at deliveries whose invisible time has passed (delivered again
with the next attempt, or moved to `%DLQ%<group>` once the group's retryMaxTimes + 1 attempts are
used up), at FIFO messages whose message group became free, and at the queues' new messages from
where each queue's window was examined up to, every queue of the topic in turn, starting one
further each time. New groups start as the 4.x side starts them: at a queue's first offset while
the queue still holds its first message, else at its end; when something else set the group's
consumer offset (4.x tooling resetting it), the queue's window starts again there. One receive
of a group's topic claims messages at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from broker.managers.consumer_offset_manager import new_group_starts_at_first
from broker.managers.subscription_group_manager import SubscriptionGroupConfig
from broker.pop import records
from broker.pop.core import PopCore
from broker.pop.errors import PopError, Refusal
from broker.pop.filtering import EVERYTHING, MessageFilter
from broker.pop.handles import ReceiptHandle
from broker.pop.queue_state import Delivery, QueueState, TopicState
from broker.pop.reading import message_group
from broker.pop.settings import MAX_BATCH_SIZE
from rocketspark.errors import RocketMQError
from rocketspark.protocol.body.topic import Perm, TopicConfig

log = logging.getLogger(__name__)

#: receives remembered by attempt id, so a receive tried again gets what the lost answer held
REMEMBERED_ATTEMPTS = 1024


@dataclass(frozen=True, slots=True)
class ReceiveRequest:
    group: str
    topic: str
    batch_size: int
    invisible_ms: int = 0  # ignored with auto_renew
    filter: MessageFilter = EVERYTHING
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


class Receiving:
    def __init__(self, core: PopCore) -> None:
        self.core = core
        self._attempts: OrderedDict[tuple[str, str, str], list[tuple[int, int, int]]] = OrderedDict()

    async def receive(self, request: ReceiveRequest) -> list[Received]:
        """Up to `batch_size` messages, waiting up to `long_polling_ms` for the first ones."""
        settings = self.core.settings
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
        config, topic_config = self._check(request.group, request.topic)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(request.long_polling_ms, 0), settings.max_long_polling_ms) / 1000
        key = (request.group, request.topic)
        while True:
            found = await self._pop(request, topic_config, invisible, wanted, config.retry_max_times + 1)
            remaining = deadline - loop.time()
            if found or remaining <= 0:
                return found
            expiry = self.core.tables.topics[key].next_expiry()
            if expiry is not None:
                remaining = min(remaining, max(expiry - self.core.clock(), 0) / 1000 + 0.001)
            await self.core.waiters.wait(request.group, request.topic, request.filter.codes, remaining)

    def _check(self, group: str, topic: str) -> tuple[SubscriptionGroupConfig, TopicConfig]:
        broker = self.core.broker
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
        lock = self.core.lock(*key)
        async with lock:
            state = self.core.tables.topics.setdefault(key, TopicState())
            pop = _Pop(request, state, invisible, wanted, max_attempts, self.core.clock(), [], set())
            try:
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
            except BaseException:
                self._give_back(pop)
                raise
        try:
            await self.core.written()
        except BaseException:
            self._give_back(pop)
            raise
        self.core.mirror(request.group, request.topic, pop.touched)
        if request.attempt_id is not None and pop.found:
            self._remember_attempt(request, pop)
        return pop.found

    def _give_back(self, pop: _Pop) -> None:
        """A receive that claimed messages and did not answer (cancelled: its client went away; or
        failed): they are visible again soon, as Apache's proxy makes them (invisibleTimeMillisWhenClear)."""
        core = self.core
        until = core.clock() + core.settings.clear_ms
        for received in pop.found:
            handle = ReceiptHandle.decode(received.receipt_handle)
            delivery = pop.state.current(handle.queue_id, handle.offset, handle.delivery_id)
            if delivery is not None and delivery.invisible_until > until:
                delivery.invisible_until, delivery.renew_client = until, None
                core.changed(pop.request.group, pop.request.topic, handle.queue_id, delivery)

    async def _repeat_attempt(self, pop: _Pop) -> None:
        """A receive tried again (same attempt id): what the first try delivered and is still invisible."""
        request = pop.request
        earlier = self._attempts.get((request.group, request.topic, request.attempt_id or ""), [])
        for queue_id, offset, delivery_id in earlier:
            delivery = pop.state.current(queue_id, offset, delivery_id)
            if delivery is None or delivery.invisible_until <= pop.now:
                continue
            row = await self.core.reader.row(request.topic, offset, delivery.commit_log_offset)
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
            row = await self.core.reader.row(request.topic, delivery.offset, delivery.commit_log_offset)
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
                self.core.finish(request.group, request.topic, queue_id, delivery.offset)
            elif delivery.attempt >= pop.max_attempts:
                try:
                    await self.core.dead_letter(request.group, row, delivery.attempt)
                except RocketMQError as exc:
                    log.warning("could not move a message of group %s to its dead-letter topic: %s", request.group, exc)
                    state.expect(queue_id, delivery)  # the next receive tries again
                    continue
                self.core.finish(request.group, request.topic, queue_id, delivery.offset)
            elif not request.filter.accepts(row):
                self.core.finish(request.group, request.topic, queue_id, delivery.offset)
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
                row = await self.core.reader.row(request.topic, offset, commit_log_offset)
                if row is None:
                    queue.finish(offset)  # removed meanwhile
                else:
                    self._deliver(pop, queue_id, row, group, 1)
        if not pop.full:
            restart = await self.core.reader.examine(
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
                self.core.reset(request.group, request.topic, queue_id, queue, restart)
        if queue.base != base:
            self.core.journal.append(records.base_record(request.group, request.topic, queue_id, queue.base))
            pop.touched.add(queue_id)

    def _examined(self, pop: _Pop, queue_id: int, queue: QueueState, row: dict[str, Any]) -> None:
        """A new message of the queue (at or above its base, not seen before): finish, hold or deliver it."""
        offset = int(row["queue_offset"])
        if not pop.request.filter.accepts(row):
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
            self.core.tables.take_delivery_id(),
            attempt,
            pop.now + pop.invisible_ms,
            group,
            request.client_id if renew else None,
            pop.now + self.core.settings.renew_max_ms if renew else 0,
        )
        pop.state.deliver(queue_id, delivery)
        queue = pop.state.queues[queue_id]
        self.core.journal.append(records.deliver_record(request.group, request.topic, queue_id, delivery, queue.base))
        if renew:
            self.core.renewing[(request.group, request.topic, queue_id, offset)] = None
        handle = ReceiptHandle(queue_id, offset, delivery.delivery_id, delivery.invisible_until)
        pop.found.append(Received(row, handle.encode(), attempt, pop.invisible_ms))
        pop.touched.add(queue_id)

    def _queue(self, pop: _Pop, queue_id: int) -> QueueState:
        """The group's window of a queue: made where a new group starts, or started again where
        the group's consumer offset was set to."""
        group, topic = pop.request.group, pop.request.topic
        current = self.core.broker.consumer_offsets.query(group, topic, queue_id)
        queue = pop.state.queues.get(queue_id)
        if queue is None:
            store = self.core.broker.store
            if current is not None:
                base = current
            elif new_group_starts_at_first(store.min_offset(topic, queue_id)):
                base = 0
            else:
                base = store.max_offset(topic, queue_id)
            queue = self.core.tables.queue(group, topic, queue_id, base)
            queue.committed = current
            self.core.journal.append(records.base_record(group, topic, queue_id, base))
            pop.touched.add(queue_id)
        elif current is not None and queue.committed is not None and current != queue.committed:
            log.info(
                "consumer offset of group %s for %s:%d was set to %d: its 5.x deliveries start there",
                group,
                topic,
                queue_id,
                current,
            )
            self.core.reset(group, topic, queue_id, queue, current)
            pop.touched.add(queue_id)
        return queue
