"""Where a consumer keeps its progress: on the brokers (clustering) or in a local file (broadcasting).

Offsets are "next offset to consume". Updates only move forward unless a reset is asked for, as in
RocketMQ's `ControllableOffset`; persisting drops queues the consumer no longer holds.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import Collection
from pathlib import Path

import orjson

from rocketspark.client.api import offset as offset_api
from rocketspark.client.instance import ClientInstance
from rocketspark.errors import RocketMQError
from rocketspark.fileutil import write_atomically
from rocketspark.protocol.queue import MessageQueue

log = logging.getLogger(__name__)

#: what `read_offset` answers when the store has no offset for the queue
NO_OFFSET = -1
#: what it answers when asking the broker failed
READ_ERROR = -2


def advances(current: int | None, offset: int) -> bool:
    """Whether `offset` moves a queue's progress on from `current` (None: none yet): the
    increase-only rule of every offset store here, and of the Spark source's mirror of its
    progress into the group's offsets."""
    return current is None or offset > current


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetStore(ABC):
    def __init__(self, group: str) -> None:
        self.group = group
        self.table: dict[MessageQueue, int] = {}

    def update_offset(self, queue: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        if not increase_only or advances(self.table.get(queue), offset):
            self.table[queue] = offset

    async def read_offset(self, queue: MessageQueue, read_type: ReadOffsetType) -> int:
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            in_memory = self.table.get(queue)
            if in_memory is not None or read_type is ReadOffsetType.READ_FROM_MEMORY:
                return NO_OFFSET if in_memory is None else in_memory
        stored = await self._read_stored(queue)
        if stored >= 0:
            self.update_offset(queue, stored, increase_only=False)
        return stored

    def remove_offset(self, queue: MessageQueue) -> None:
        self.table.pop(queue, None)

    @abstractmethod
    async def load(self) -> None: ...

    @abstractmethod
    async def _read_stored(self, queue: MessageQueue) -> int: ...

    async def committed(self, queue: MessageQueue) -> int:
        """What the store holds for `queue`, without touching memory; NO_OFFSET when nothing."""
        return await self._read_stored(queue)

    @abstractmethod
    async def persist_all(self, queues: Collection[MessageQueue]) -> None:
        """Persist the offsets of `queues` and forget every other queue."""


class RemoteBrokerOffsetStore(OffsetStore):
    """Offsets kept by the broker of each queue (clustering consumers, and the Spark source)."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__(group)
        self.instance = instance

    async def load(self) -> None:
        """Nothing to load: offsets are read from the brokers when needed."""

    async def _read_stored(self, queue: MessageQueue, *, zero_if_not_found: bool | None = None) -> int:
        try:
            address = await self.instance.broker_address(queue.broker_name, queue.topic)
            found = await offset_api.query_consumer_offset(
                self.instance.remoting,
                address,
                self.group,
                queue.topic,
                queue.queue_id,
                set_zero_if_not_found=zero_if_not_found,
            )
        except RocketMQError as exc:
            log.warning("reading the offset of %s for group %s failed: %s", queue, self.group, exc)
            return READ_ERROR
        return NO_OFFSET if found is None else found

    async def committed(self, queue: MessageQueue) -> int:
        # Apache brokers answer 0 for a group without an offset while the queue's first message is
        # still there; asking with setZeroIfNotFound=false tells "no offset" apart where brokers honour it.
        return await self._read_stored(queue, zero_if_not_found=False)

    async def persist(self, queue: MessageQueue) -> None:
        offset = self.table.get(queue)
        if offset is None:
            return
        address = await self.instance.broker_address(queue.broker_name, queue.topic)
        await offset_api.update_consumer_offset(
            self.instance.remoting, address, self.group, queue.topic, queue.queue_id, offset
        )

    async def persist_all(self, queues: Collection[MessageQueue]) -> None:
        for queue in list(self.table):
            if queue not in queues:
                del self.table[queue]
                continue
            try:
                await self.persist(queue)
            except RocketMQError as exc:
                log.warning("persisting the offset of %s for group %s failed: %s", queue, self.group, exc)


class LocalFileOffsetStore(OffsetStore):
    """Offsets in `<directory>/<group>/offsets.json`, replaced atomically (broadcasting consumers).

    The file is read and written (with fsyncs) on a worker thread, never on the client's event
    loop, which every producer and consumer of the client instance shares: one fsync can take tens
    of milliseconds on a busy disk, and persisting runs every few seconds (issue 24).
    """

    def __init__(self, directory: Path, group: str) -> None:
        super().__init__(group)
        self.path = directory / group / "offsets.json"
        self._writing = asyncio.Lock()  # one write at a time, in the order persist_all was called

    def _file_offsets(self) -> dict[MessageQueue, int]:
        if not self.path.exists():
            return {}
        try:
            entries = orjson.loads(self.path.read_bytes())["offsets"]
            return {MessageQueue.from_dict(entry): int(entry["offset"]) for entry in entries}
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise RocketMQError(f"offset file {self.path} is unreadable: {exc}") from None

    async def load(self) -> None:
        self.table.update(await asyncio.to_thread(self._file_offsets))

    async def _read_stored(self, queue: MessageQueue) -> int:
        return (await asyncio.to_thread(self._file_offsets)).get(queue, NO_OFFSET)

    async def persist_all(self, queues: Collection[MessageQueue]) -> None:
        for queue in [q for q in self.table if q not in queues]:
            del self.table[queue]
        entries = [{**q.to_dict(), "offset": o} for q, o in sorted(self.table.items())]
        data = orjson.dumps({"offsets": entries}, option=orjson.OPT_INDENT_2)
        async with self._writing:
            await asyncio.to_thread(write_atomically, self.path, data)
