"""`PopService`: pop-style consumption of a consumer group's topic (receive, ack, change invisible
duration, forward to the dead-letter topic), durable across restarts and kill -9.

Receives are broker/pop/receiving.py's; the state they and acknowledgements share, its journal and
the mirror into the consumer offsets are broker/pop/core.py's. Each change is a journal record
(broker/pop/records.py) written before the answer that depends on it. Acks and changes take no
lock: each checks and changes the state without waiting in between. Push consumers' deliveries
(auto_renew) are renewed here while their client stays in the group, and released once it left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from broker.pop.core import PopContext, PopCore, now_ms
from broker.pop.errors import PopError, Refusal
from broker.pop.handles import ReceiptHandle
from broker.pop.receiving import Received, ReceiveRequest, Receiving
from broker.pop.settings import CLIENT_GONE_GRACE_MS, PopSettings
from broker.store.config import FlushDiskType
from rocketspark.service import PeriodicService

#: how often push consumers' messages are renewed (or released, once their client left)
RENEW_INTERVAL_S = 1.0


class PopService:
    def __init__(self, broker: PopContext, *, clock: Callable[[], int] = now_ms) -> None:
        self.core = PopCore(broker, clock)
        self._receiving = Receiving(self.core)
        # (group, client id) -> when the client was first seen out of its group, while it has messages renewed
        self._absent: dict[tuple[str, str], int] = {}
        self._services = [PeriodicService("pop-renew", RENEW_INTERVAL_S, self.renew)]
        store_config = broker.store_config
        if store_config.flush_disk_type is FlushDiskType.ASYNC_FLUSH:
            flush = self.core.journal.flush
            self._services.append(
                PeriodicService("pop-journal-flush", store_config.flush_interval_commit_log / 1000, flush)
            )
        self.running = False

    @property
    def settings(self) -> PopSettings:
        return self.core.settings

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the state the store directory holds and mirror it into the consumer offsets."""
        core = self.core
        core.tables = await core.journal.load()
        for (group, topic), state in core.tables.topics.items():
            for queue_id, queue in state.queues.items():
                for delivery in queue.in_flight.values():
                    if delivery.renew_client is not None:
                        core.renewing[(group, topic, queue_id, delivery.offset)] = None
                core.mirror_loaded(group, topic, queue_id, queue)
        core.broker.store.add_arrival_listener(core.waiters.arrived)
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
        await self.core.journal.close(self.core.tables.encode_snapshot)

    # -- receiving and acknowledging -----------------------------------------------------------

    async def receive(self, request: ReceiveRequest) -> list[Received]:
        """Up to `batch_size` messages, waiting up to `long_polling_ms` for the first ones."""
        return await self._receiving.receive(request)

    async def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        """Finish the message a handle names (a handle of a message acknowledged already: no-op)."""
        (refusal,) = await self.ack_all(group, topic, [receipt_handle])
        if refusal is not None:
            raise refusal

    async def ack_all(self, group: str, topic: str, receipt_handles: Iterable[str]) -> list[PopError | None]:
        """Finish the messages the handles name, with one journal write and one mirror for them all
        (an AckMessage of several entries); each handle's refusal, or None once its ack is written."""
        refusals: list[PopError | None] = []
        queue_ids: set[int] = set()
        for text in receipt_handles:
            try:
                handle = ReceiptHandle.decode(text)
                if self.core.current(group, topic, handle) is not None:
                    self.core.finish(group, topic, handle.queue_id, handle.offset)
            except PopError as exc:
                refusals.append(exc)
                continue
            refusals.append(None)
            queue_ids.add(handle.queue_id)
        if queue_ids:
            try:
                await self.core.written()
            except PopError as exc:  # nothing is promised that was not written
                return [exc if refusal is None else refusal for refusal in refusals]
            self.core.mirror(group, topic, queue_ids)
        return refusals

    async def change_invisible_duration(self, group: str, topic: str, receipt_handle: str, invisible_ms: int) -> str:
        """Make the message visible again `invisible_ms` from now; the new handle (the old one is stale)."""
        if not 0 <= invisible_ms <= self.core.settings.max_invisible_ms:
            raise PopError(
                Refusal.ILLEGAL_INVISIBLE_TIME,
                f"the invisible duration must be within 0 and {self.core.settings.max_invisible_ms} ms "
                f"(maxInvisibleTimeMills), got {invisible_ms} ms",
            )
        handle = ReceiptHandle.decode(receipt_handle)
        delivery = self.core.current(group, topic, handle)
        if delivery is None:
            raise PopError(Refusal.INVALID_RECEIPT_HANDLE, "the message was acknowledged already")
        delivery.delivery_id = self.core.tables.take_delivery_id()
        delivery.invisible_until = self.core.clock() + invisible_ms
        delivery.renew_client = None  # a push consumer's nack: no more renewals
        self.core.changed(group, topic, handle.queue_id, delivery)
        await self.core.written()
        return ReceiptHandle(handle.queue_id, handle.offset, delivery.delivery_id, delivery.invisible_until).encode()

    async def forward_to_dead_letter(self, group: str, topic: str, receipt_handle: str) -> None:
        """Move the message a handle names to the group's dead-letter topic (a FIFO consumer gave up)."""
        handle = ReceiptHandle.decode(receipt_handle)
        async with self.core.lock(group, topic):  # no redelivery meanwhile
            delivery = self.core.current(group, topic, handle, expired_too=True)
            if delivery is None:
                return
            row = await self.core.reader.row(topic, delivery.offset, delivery.commit_log_offset)
            if row is not None:
                await self.core.dead_letter(group, row, delivery.attempt)
            if self.core.tables.topics[(group, topic)].current(handle.queue_id, handle.offset, handle.delivery_id):
                self.core.finish(group, topic, handle.queue_id, handle.offset)
        await self.core.written()
        self.core.mirror(group, topic, {handle.queue_id})

    # -- renewal -------------------------------------------------------------------------------

    def renew(self) -> None:
        """Keep push consumers' messages invisible while their client stays in the group; release
        those of clients that left."""
        now, settings = self.core.clock(), self.core.settings
        members: dict[str, set[str]] = {}
        absent_before, self._absent = self._absent, {}
        for key in list(self.core.renewing):
            group, topic, queue_id, offset = key
            state = self.core.tables.topics.get((group, topic))
            queue = state.queues.get(queue_id) if state is not None else None
            delivery = queue.in_flight.get(offset) if queue is not None else None
            if state is None or delivery is None or delivery.renew_client is None:
                del self.core.renewing[key]
                continue
            if group not in members:
                info = self.core.broker.consumers.groups.get(group)
                members[group] = set(info.client_ids()) if info is not None else set()
            gone = False
            if delivery.renew_client not in members[group]:  # gone once out of the group for the grace time
                client = (group, delivery.renew_client)
                since = self._absent[client] = absent_before.get(client, now)
                gone = now - since > CLIENT_GONE_GRACE_MS
            if gone:
                delivery.renew_client = None
                delivery.invisible_until = min(delivery.invisible_until, now + settings.clear_ms)
            elif now >= delivery.renew_deadline:
                delivery.renew_client = None  # renewed long enough (renewMaxTimeMillis)
            elif delivery.invisible_until - now <= settings.renew_ahead_ms:
                delivery.invisible_until = min(now + settings.renew_slice_ms, delivery.renew_deadline)
            else:
                continue
            if delivery.renew_client is None:
                del self.core.renewing[key]
            self.core.changed(group, topic, queue_id, delivery)
