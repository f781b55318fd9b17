"""The pop engine's durable state: journal records, the snapshot, and replaying them.

Each change of a consumer group's window is one journal record, a JSON array whose first element
names its kind; every record names the group, topic and queue, and most carry the queue's base
after the change (bases also move without a record of their own: skipped messages):

- `["d", group, topic, queue, offset, commitLogOffset, deliveryId, attempt, invisibleUntil,
  messageGroup, renewClient, renewDeadline, base]`: a delivery (a first one, or a redelivery);
- `["c", group, topic, queue, offset, deliveryId, invisibleUntil, renewClient, renewDeadline]`: a
  delivery's invisible time changed (a new handle's id, or the same id when renewed);
- `["f", group, topic, queue, offset, base]`: a message finished (acknowledged, dead-lettered, gone);
- `["b", group, topic, queue, base]`: the base moved past skipped messages;
- `["r", group, topic, queue, base]`: the group's offset was reset: the window starts again at base.

Held FIFO messages and skipped offsets above the base are not recorded: after a restart the
queues are examined again from their base. The snapshot holds every queue's base, the ranges of
finished offsets above it and its deliveries in flight, and the journal it covers; replaying the later
journals onto it gives the state the broker had.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import orjson

from broker.pop.queue_state import Delivery, QueueState, TopicState

DELIVER, CHANGE, FINISH, BASE, RESET = "d", "c", "f", "b", "r"
SNAPSHOT_VERSION = 1


def line(record: list[Any]) -> bytes:
    return orjson.dumps(record) + b"\n"


def deliver_record(group: str, topic: str, queue_id: int, delivery: Delivery, base: int) -> bytes:
    return line([DELIVER, group, topic, queue_id, *delivery.fields(), base])


def change_record(group: str, topic: str, queue_id: int, delivery: Delivery) -> bytes:
    d = delivery
    return line(
        [CHANGE, group, topic, queue_id, d.offset, d.delivery_id, d.invisible_until, d.renew_client, d.renew_deadline]
    )


def finish_record(group: str, topic: str, queue_id: int, offset: int, base: int) -> bytes:
    return line([FINISH, group, topic, queue_id, offset, base])


def base_record(group: str, topic: str, queue_id: int, base: int) -> bytes:
    return line([BASE, group, topic, queue_id, base])


def reset_record(group: str, topic: str, queue_id: int, base: int) -> bytes:
    return line([RESET, group, topic, queue_id, base])


class PopTables:
    """Every consumer group's windows, by (group, topic), and the next delivery id."""

    def __init__(self) -> None:
        self.topics: dict[tuple[str, str], TopicState] = {}
        # unique across restarts: at least the time in µs when the state was loaded
        self.next_delivery_id = time.time_ns() // 1000

    def queue(self, group: str, topic: str, queue_id: int, base: int) -> QueueState:
        """The window of a queue, made at `base` when there is none yet."""
        state = self.topics.setdefault((group, topic), TopicState())
        queue = state.queues.get(queue_id)
        if queue is None:
            queue = state.queues[queue_id] = QueueState(base)
        return queue

    def take_delivery_id(self) -> int:
        self.next_delivery_id += 1
        return self.next_delivery_id

    def _seen_delivery_id(self, delivery_id: int) -> None:
        self.next_delivery_id = max(self.next_delivery_id, delivery_id)

    def apply(self, record: list[Any]) -> None:
        """Replay one journal record."""
        kind, group, topic, queue_id = record[0], str(record[1]), str(record[2]), int(record[3])
        if kind == CHANGE:
            state = self.topics.get((group, topic))
            queue = state.queues.get(queue_id) if state is not None else None
            delivery = queue.in_flight.get(record[4]) if queue is not None else None
            if state is not None and delivery is not None:
                delivery.delivery_id, delivery.invisible_until = int(record[5]), int(record[6])
                delivery.renew_client, delivery.renew_deadline = record[7], int(record[8])
                state.expect(queue_id, delivery)
            self._seen_delivery_id(int(record[5]))
            return
        queue = self.queue(group, topic, queue_id, int(record[-1]))
        if kind == DELIVER:
            delivery = Delivery.of_fields(record[4:12])
            queue.raise_base(int(record[12]))
            if delivery.offset >= queue.base:
                self.topics[(group, topic)].deliver(queue_id, delivery)
            self._seen_delivery_id(delivery.delivery_id)
        elif kind == FINISH:
            queue.finish(int(record[4]))
            queue.raise_base(int(record[5]))
        elif kind == BASE:
            queue.raise_base(int(record[4]))
        elif kind == RESET:
            queue.reset(int(record[4]))
        else:
            raise ValueError(f"unknown pop journal record kind {kind!r}")

    def encode_snapshot(self, journal: int) -> bytes:
        """Every window, covering the journals up to and including number `journal`."""
        queues = []
        for (group, topic), state in self.topics.items():
            for queue_id, queue in state.queues.items():
                in_flight = [d.fields() for d in queue.in_flight.values()]
                queues.append([group, topic, queue_id, queue.base, [list(r) for r in queue.done.ranges()], in_flight])
        return orjson.dumps(
            {
                "version": SNAPSHOT_VERSION,
                "journal": journal,
                "nextDeliveryId": self.next_delivery_id,
                "queues": queues,
            }
        )

    @classmethod
    def decode_snapshot(cls, data: bytes) -> tuple[PopTables, int]:
        """The windows of a snapshot, and the last journal number it covers."""
        snapshot = orjson.loads(data)
        if snapshot.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"pop snapshot version {snapshot.get('version')!r} is not {SNAPSHOT_VERSION}")
        tables = cls()
        tables._seen_delivery_id(int(snapshot["nextDeliveryId"]))
        for group, topic, queue_id, base, done, in_flight in snapshot["queues"]:
            queue = tables.queue(group, topic, queue_id, base)
            for start, end in done:
                queue.done.add_range(int(start), int(end))
            state = tables.topics[(group, topic)]
            for fields in in_flight:
                state.deliver(queue_id, Delivery.of_fields(fields))
            queue.scan = queue.base
        return tables, int(snapshot["journal"])

    def replay(self, records: Iterable[list[Any]]) -> int:
        count = 0
        for record in records:
            self.apply(record)
            count += 1
        for state in self.topics.values():
            for queue in state.queues.values():
                queue.scan = queue.base  # examine again from the base
        return count
