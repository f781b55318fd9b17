"""The store checkpoint: how far the commit log is known flushed, how far its consume queues and
index are known flushed, and how long each consume queue was then. Recovery verifies the log after
the first, dispatches it again after the second, and rebuilds the queues from the log when one is
shorter on disk than the third says."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from rocketspark.fileutil import write_atomically

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    commit_log_flushed: int = 0
    dispatched: int = 0
    # "topic:queueId" -> entries of that consume queue on disk (its max offset) at `dispatched`
    queues: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Checkpoint | None:
        """The saved checkpoint, or None when there is none or it is unreadable."""
        try:
            data = orjson.loads(path.read_bytes())
            queues = {str(k): int(v) for k, v in (data.get("consumeQueues") or {}).items()}
            return cls(int(data["commitLogFlushedOffset"]), int(data["dispatchedOffset"]), queues)
        except FileNotFoundError:
            return None
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            log.warning("store checkpoint %s is unreadable (%s); rebuilding from the commit log", path, exc)
            return None

    def save(self, path: Path) -> None:
        write_atomically(
            path,
            orjson.dumps(
                {
                    "commitLogFlushedOffset": self.commit_log_flushed,
                    "dispatchedOffset": self.dispatched,
                    "consumeQueues": self.queues,
                }
            ),
        )
