"""Committed consumer offsets: `topic@group -> queue id -> next offset to consume`.

Kept in memory, written to `config/consumerOffset.json` (Java's shape) every
`flushConsumerOffsetInterval` and at shutdown, atomically.
"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson

from rocketspark.fileutil import write_atomically

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, path: Path) -> None:
        self.path = path
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

    def groups_of_topic(self, topic: str) -> list[str]:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        return sorted(key[len(prefix) :] for key in self.table if key.startswith(prefix))

    def topics_of_group(self, group: str) -> list[str]:
        suffix = TOPIC_GROUP_SEPARATOR + group
        return sorted(key[: -len(suffix)] for key in self.table if key.endswith(suffix))

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", {}))

    def delete_topic(self, topic: str) -> None:
        for key in [k for k in self.table if k.rsplit(TOPIC_GROUP_SEPARATOR, 1)[0] == topic]:
            del self.table[key]
            self._dirty = True

    def persist(self) -> None:
        if not self._dirty and self.path.exists():
            return
        self._dirty = False
        table = {key: {str(q): o for q, o in sorted(offsets.items())} for key, offsets in sorted(self.table.items())}
        write_atomically(self.path, orjson.dumps({"offsetTable": table}, option=orjson.OPT_INDENT_2))
