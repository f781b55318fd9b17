"""Receipt handles: what a 5.x consumer gets with each delivered message and names in its ack.

A handle names one delivery: the queue and offset of the message, the delivery's id (unique to the
broker, across restarts) and the time its message becomes visible again. The engine keeps the
current delivery of every message in flight; a handle of an earlier delivery (the message was
delivered again since, or its invisible duration changed, which makes a new handle) is refused.
Consumers treat handles as opaque strings; Apache's are laid out differently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.pop.errors import PopError, Refusal

#: the layout's version, first in every handle
VERSION = "1"
_PATTERN = re.compile(rf"{VERSION} ([0-9]{{1,10}}) ([0-9]{{1,19}}) ([0-9]{{1,20}}) ([0-9]{{1,16}})", re.ASCII)
#: longest handle accepted (a hostile peer's string is not parsed further)
MAX_LENGTH = 80


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    queue_id: int
    offset: int
    delivery_id: int
    invisible_until: int  # epoch ms

    def encode(self) -> str:
        return f"{VERSION} {self.queue_id} {self.offset} {self.delivery_id} {self.invisible_until}"

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        """The handle `text` encodes; INVALID_RECEIPT_HANDLE when it is none of ours."""
        found = _PATTERN.fullmatch(text) if len(text) <= MAX_LENGTH else None
        if found is None:
            raise PopError(
                Refusal.INVALID_RECEIPT_HANDLE,
                "receipt handle is malformed: pass the receipt_handle of a message this broker delivered",
            )
        queue_id, offset, delivery_id, until = (int(part) for part in found.groups())
        return cls(queue_id, offset, delivery_id, until)
