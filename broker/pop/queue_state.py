"""What one consumer group has of one queue, and of one topic, in pop-style consumption (pure state).

Offsets below a queue's `base` are finished: acknowledged, moved to the dead-letter topic, or
skipped (by the tag filter, or removed by retention). Each offset of [base, scan) is exactly one
of: finished (`done`), in flight (delivered, invisible until a time) or held (a FIFO message
waiting for the message before it in its message group to finish). Offsets from `scan` on were
not examined since the broker started: after a restart `scan` starts at `base`, and offsets found
finished or in flight there are passed over. `base` is what the group's consumer offset shows.

A message group has at most one message in flight (`busy`); the messages of the group examined
after it wait in `held`, in offset order.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from broker.pop.ranges import OffsetRanges


@dataclass(slots=True)
class Delivery:
    """The current delivery of a message in flight."""

    offset: int
    commit_log_offset: int
    delivery_id: int
    attempt: int  # 1 on the first delivery
    invisible_until: int  # epoch ms
    message_group: str | None = None
    # auto-renewed (a push consumer's receive) while this client stays in the group, until renew_deadline
    renew_client: str | None = None
    renew_deadline: int = 0

    def fields(self) -> list[int | str | None]:
        """The delivery as a journal record or snapshot lists it."""
        return [
            self.offset,
            self.commit_log_offset,
            self.delivery_id,
            self.attempt,
            self.invisible_until,
            self.message_group,
            self.renew_client,
            self.renew_deadline,
        ]

    @classmethod
    def of_fields(cls, fields: list[Any]) -> Delivery:
        offset, commit_log_offset, delivery_id, attempt, until, message_group, client, deadline = fields
        return cls(
            int(offset),
            int(commit_log_offset),
            int(delivery_id),
            int(attempt),
            int(until),
            message_group,
            client,
            int(deadline),
        )


class QueueState:
    """The in-flight window of one queue for one consumer group."""

    __slots__ = ("base", "busy", "committed", "done", "held", "held_count", "in_flight", "scan")

    def __init__(self, base: int) -> None:
        self.base = base
        self.scan = base
        self.done = OffsetRanges()  # finished offsets at or above base
        self.in_flight: dict[int, Delivery] = {}
        self.held: dict[str, deque[tuple[int, int]]] = {}  # message group -> (offset, commit log offset)
        self.held_count = 0
        self.busy: dict[str, int] = {}  # message group -> its offset in flight
        self.committed: int | None = None  # the base last written to the consumer offsets

    def examined(self, offset: int) -> bool:
        """Whether `offset` (at or above base) is finished or in flight already."""
        return offset < self.base or offset in self.done or offset in self.in_flight

    def waits(self, message_group: str) -> bool:
        """Whether a message of `message_group` examined now must wait for one before it."""
        return message_group in self.busy or message_group in self.held

    def hold(self, message_group: str, offset: int, commit_log_offset: int) -> None:
        self.held.setdefault(message_group, deque()).append((offset, commit_log_offset))
        self.held_count += 1
        self.scan = max(self.scan, offset + 1)

    def ready_groups(self) -> list[str]:
        """Message groups whose next message may be delivered now."""
        return [group for group in self.held if group not in self.busy]

    def take_held(self, message_group: str) -> tuple[int, int]:
        """The next waiting (offset, commit log offset) of a ready message group."""
        waiting = self.held[message_group]
        taken = waiting.popleft()
        if not waiting:
            del self.held[message_group]
        self.held_count -= 1
        return taken

    def deliver(self, delivery: Delivery) -> None:
        self.in_flight[delivery.offset] = delivery
        if delivery.message_group is not None:
            self.busy[delivery.message_group] = delivery.offset
        self.scan = max(self.scan, delivery.offset + 1)

    def finish(self, offset: int) -> Delivery | None:
        """Mark `offset` finished; the delivery it had in flight, if any."""
        delivery = self.in_flight.pop(offset, None)
        if (
            delivery is not None
            and delivery.message_group is not None
            and self.busy.get(delivery.message_group) == offset
        ):
            del self.busy[delivery.message_group]
        if offset >= self.base:
            self.done.add(offset)
            self._advance()
        return delivery

    def skip(self, start: int, end: int) -> None:
        """[start, end) was examined: every offset of it not in flight is finished (filtered, removed)."""
        self.scan = max(self.scan, end)
        start = max(start, self.base)
        if start >= end:
            return
        inside = sorted(o for o in self.in_flight if start <= o < end)
        for low, high in zip([start] + [o + 1 for o in inside], [*inside, end], strict=True):
            self.done.add_range(low, high)
        self._advance()

    def raise_base(self, base: int) -> None:
        """Move `base` up to `base` (a journal's record of it: nothing below it is in flight)."""
        if base > self.base:
            self.base = base
            self.done.drop_below(base)
            self.scan = max(self.scan, base)
            self._advance()

    def reset(self, base: int) -> None:
        """Forget the window and start at `base` (the group's offset was reset)."""
        self.base = self.scan = base
        self.done.clear()
        self.in_flight.clear()
        self.held.clear()
        self.held_count = 0
        self.busy.clear()

    def _advance(self) -> None:
        self.base = self.done.take_prefix(self.base)
        self.scan = max(self.scan, self.base)


@dataclass(order=True, slots=True)
class Expiry:
    """When a delivery's invisible time passes (checked against the delivery when it comes up)."""

    invisible_until: int
    queue_id: int
    offset: int
    delivery_id: int


class TopicState:
    """A consumer group's queues of one topic, and when their deliveries expire."""

    __slots__ = ("expiries", "next_queue", "queues")

    def __init__(self) -> None:
        self.queues: dict[int, QueueState] = {}
        self.expiries: list[Expiry] = []  # a heap; entries of finished or later deliveries are dropped as they come up
        self.next_queue = 0  # where the next receive starts looking, so every queue gets its turn

    def deliver(self, queue_id: int, delivery: Delivery) -> None:
        self.queues[queue_id].deliver(delivery)
        self.expect(queue_id, delivery)

    def expect(self, queue_id: int, delivery: Delivery) -> None:
        heapq.heappush(self.expiries, Expiry(delivery.invisible_until, queue_id, delivery.offset, delivery.delivery_id))

    def expired(self, now_ms: int) -> Iterator[tuple[int, Delivery]]:
        """(queue id, delivery) of every delivery whose invisible time has passed, earliest first;
        each is dropped from the expiries as it is yielded."""
        while self.expiries and self.expiries[0].invisible_until <= now_ms:
            entry = heapq.heappop(self.expiries)
            delivery = self.current(entry.queue_id, entry.offset, entry.delivery_id)
            if delivery is not None and delivery.invisible_until == entry.invisible_until:
                yield entry.queue_id, delivery

    def next_expiry(self) -> int | None:
        """The earliest invisible-until time of a delivery still current, if any."""
        while self.expiries:
            entry = self.expiries[0]
            delivery = self.current(entry.queue_id, entry.offset, entry.delivery_id)
            if delivery is not None and delivery.invisible_until == entry.invisible_until:
                return entry.invisible_until
            heapq.heappop(self.expiries)
        return None

    def current(self, queue_id: int, offset: int, delivery_id: int) -> Delivery | None:
        queue = self.queues.get(queue_id)
        delivery = queue.in_flight.get(offset) if queue is not None else None
        return delivery if delivery is not None and delivery.delivery_id == delivery_id else None

    def in_flight_count(self) -> int:
        return sum(len(q.in_flight) for q in self.queues.values())
