"""Storing parked messages that fell due in their real queues, for both schedule services.

The messages for one queue are one write (a run); the runs are queued together, so a queue receives
its messages in the order given. What could not be stored is named, and the caller tries it again
later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from broker.store.message_store import MessageStore
from broker.store.results import PutResult
from broker.store.writer.append_requests import StandardMessage
from rocketspark.errors import RocketMQError

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


@dataclass(slots=True)
class _Run(Generic[K]):
    """The due messages for one queue, and the keys the caller knows them by."""

    topic: str
    queue_id: int
    messages: list[StandardMessage] = field(default_factory=list)
    keys: list[K] = field(default_factory=list)


async def store_due(store: MessageStore, due: Sequence[tuple[str, int, StandardMessage, K]]) -> list[K]:
    """Store (topic, queue id, message, key) items, one write per queue; the keys of those stored.
    A run refused leaves it and the runs after it unqueued; a run that fails is reported, and the
    runs queued with it may still be stored."""
    by_queue: dict[tuple[str, int], _Run[K]] = {}
    for topic, queue_id, message, key in due:
        run = by_queue.setdefault((topic, queue_id), _Run(topic, queue_id))
        run.messages.append(message)
        run.keys.append(key)
    runs = list(by_queue.values())
    writes: list[tuple[_Run[K], asyncio.Future[PutResult]]] = []
    for run in runs:
        try:
            writes.append((run, store.put_messages(run.topic, run.queue_id, run.messages)))
        except RocketMQError as exc:  # the store is busy: the rest waits
            log.warning("storing due messages in %s failed: %s; trying again", run.topic, exc)
            break
    results = await asyncio.gather(*(write for _, write in writes), return_exceptions=True)
    stored: list[K] = []
    for (run, _), result in zip(writes, results, strict=True):
        if isinstance(result, RocketMQError):
            log.warning("storing due messages in %s failed: %s; trying again", run.topic, result)
        elif isinstance(result, BaseException):
            log.error("storing due messages in %s failed", run.topic, exc_info=result)
        else:
            stored.extend(run.keys)
    return stored
