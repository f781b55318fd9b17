"""Finding and skipping a message a consumer cannot decode, for the push and lite-pull consumers.

A pull whose answer holds a record that cannot be decoded (corrupt, or a body that does not
decompress) fails as a whole, and would fail again at every retry. The queue's next pulls then
take one message at a time up to the end of that answer, so only the bad message is left out: it
is skipped with an ERROR naming its queue and offset, and counts as consumed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from rocketspark.errors import DecodeError
from rocketspark.protocol.queue import MessageQueue

log = logging.getLogger(__name__)


@dataclass(slots=True)
class OneByOne:
    """Where one queue is pulled one message at a time, after an answer that did not decode."""

    below: int = -1  # offsets under this one are pulled singly

    def pull_size(self, offset: int, batch_size: int) -> int:
        return 1 if offset < self.below else batch_size

    def skips(self, queue: MessageQueue, offset: int, wanted: int, error: DecodeError) -> bool:
        """After a pull of `wanted` messages from `offset` did not decode: whether the message at
        `offset` is the one to skip (logged), or the next pulls go one by one to find it."""
        if wanted > 1:
            log.warning(
                "a record among offsets %d..%d of %s cannot be decoded (%s); pulling them one by one",
                offset,
                offset + wanted - 1,
                queue,
                error,
            )
            self.below = offset + wanted
            return False
        log.error("skipping the message at offset %d of %s, which cannot be decoded: %s", offset, queue, error)
        return True
