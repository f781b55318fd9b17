"""Committed consumer offsets: `topic@group -> queue id -> next offset to consume`.

Kept in memory, written to `config/consumerOffset.json` (Java's shape) every
`flushConsumerOffsetInterval` and at shutdown, atomically, on the config I/O thread.
"""

from __future__ import annotations

import logging

import orjson

from rocketspark.fileutil import AtomicFileWriter

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


def new_group_starts_at_first(min_offset: int) -> bool:
    """Whether a group with no offset for a queue starts at its first message rather than its end.

    Apache RocketMQ starts a new group at offset 0 while the queue still holds its first message, so
    consumers that start "from the last offset" still see what was sent before they started."""
    return min_offset <= 0


class ConsumerOffsetManager:
    def __init__(self, writer: AtomicFileWriter) -> None:
        self.writer = writer
        self.path = writer.path
        self.table: dict[str, dict[int, int]] = {}
        self._dirty = False

    def load(self) -> None:
        if not self.path.exists():
            return
        data = orjson.loads(self.path.read_bytes())
        self.table = {
            key: {int(queue_id): int(offset) for queue_id, offset in offsets.items()}
            for key, offsets in (data.get("offsetTable") or {}).items()
        }
        log.info("loaded offsets of %d topic@group pairs from %s", len(self.table), self.path)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.table.setdefault(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {})[queue_id] = offset
        self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}).get(queue_id)

    def topics_of_group(self, group: str) -> list[str]:
        suffix = TOPIC_GROUP_SEPARATOR + group
        return sorted(key[: -len(suffix)] for key in self.table if key.endswith(suffix))

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}))

    def delete_topic(self, topic: str) -> None:
        for key in [k for k in self.table if k.rsplit(TOPIC_GROUP_SEPARATOR, 1)[0] == topic]:
            del self.table[key]
            self._dirty = True

    def encode(self) -> bytes:
        """Every committed offset in Java's shape: `{"offsetTable": {"topic@group": {"0": offset}}}`."""
        table = {k: {str(q): o for q, o in sorted(offsets.items())} for k, offsets in sorted(self.table.items())}
        return orjson.dumps({"offsetTable": table}, option=orjson.OPT_INDENT_2)

    async def persist(self) -> None:
        """Write the offsets if they changed (or were never written), and wait until they are on disk."""
        if self._dirty or not self.path.exists():
            self._dirty = False
            self.writer.write(self.encode())
        await self.writer.flush()
