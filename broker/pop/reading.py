"""What the pop engine reads of the store: single messages again, and a queue's new messages.

New messages are read from where the queue's window was examined up to (`scan`), with the
receive's tag hash codes, so the store passes over what the filter rejects; the offsets it passes
over, or that retention removed, are finished at once. Messages found finished or in flight (the
first examination after a restart starts at the base) are passed over too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.pop.queue_state import QueueState
from broker.pop.settings import MAX_HELD_PER_QUEUE
from broker.store.message_store import MessageStore
from broker.store.results import GetStatus
from rocketspark.message.properties import codec as props

#: store reads of one queue in one receive (more when FIFO messages wait for their message group)
MAX_READS_PER_QUEUE = 8
#: bytes of bodies one read of a queue takes at most
MAX_READ_BYTES = 64 * 1024 * 1024
_SHARDING_KEY = props.SHARDING_KEY + props.NAME_VALUE_SEPARATOR


def message_group(row: dict[str, Any]) -> str | None:
    """The message group (FIFO messages' __SHARDINGKEY) of a stored message, if it has one."""
    text = row["properties"]
    if _SHARDING_KEY not in text:
        return None
    return props.decode_properties(text).get(props.SHARDING_KEY) or None


class QueueReader:
    def __init__(self, store: MessageStore) -> None:
        self.store = store

    async def row(self, topic: str, offset: int, commit_log_offset: int) -> dict[str, Any] | None:
        """The stored message a delivery names; None when it is no longer stored."""
        row = await self.store.message_at(commit_log_offset)
        if row is None or row["topic"] != topic or row["queue_offset"] != offset:
            return None
        return row

    async def examine(
        self,
        topic: str,
        queue_id: int,
        queue: QueueState,
        codes: frozenset[int] | None,
        room: Callable[[], int],
        take: Callable[[dict[str, Any]], None],
    ) -> int | None:
        """Hand `take` the queue's new messages from its scan offset on while `room()` is positive.

        Returns where the window must start again when the queue no longer holds what it covers
        (its messages were removed below the window, or the queue was emptied); else None."""
        for _ in range(MAX_READS_PER_QUEUE):
            wanted = room()
            if wanted <= 0 or queue.held_count >= MAX_HELD_PER_QUEUE:
                return None
            start = queue.scan
            result = await self.store.get_messages(
                topic, queue_id, start, max_messages=wanted, max_bytes=MAX_READ_BYTES, tag_codes_filter=codes
            )
            status = result.status
            if status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
                queue.skip(start, result.next_begin_offset)
                continue
            if status is GetStatus.OFFSET_TOO_SMALL:
                queue.skip(start, result.min_offset)  # removed by retention before anyone got them
                continue
            if status is GetStatus.OFFSET_OVERFLOW_BADLY:
                return result.max_offset
            if status is GetStatus.NO_MESSAGE_IN_QUEUE:
                return 0 if start > 0 else None
            if status is not GetStatus.FOUND:
                return None  # nothing new (OFFSET_OVERFLOW_ONE), or no such queue yet
            self._take_rows(queue, start, result.next_begin_offset, result.rows(), room, take)
        return None

    @staticmethod
    def _take_rows(
        queue: QueueState,
        start: int,
        end: int,
        rows: list[dict[str, Any]],
        room: Callable[[], int],
        take: Callable[[dict[str, Any]], None],
    ) -> None:
        previous = start
        for row in rows:
            offset = int(row["queue_offset"])
            if room() <= 0:
                queue.skip(previous, offset)  # from `offset` on: not examined yet
                return
            queue.skip(previous, offset)  # passed over by the tag codes
            previous = offset + 1
            if not queue.examined(offset):
                take(row)
        queue.skip(previous, end)
