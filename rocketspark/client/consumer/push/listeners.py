"""What listeners answer, and how a listener is called: in a pool thread, failures logged."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import TypeVar

from rocketspark.message.message import MessageExt
from rocketspark.protocol.queue import MessageQueue

log = logging.getLogger(__name__)


class ConsumeStatus(enum.Enum):
    """A concurrent listener's answer (Java's ConsumeConcurrentlyStatus)."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    """An orderly listener's answer."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


ConcurrentListener = Callable[[list[MessageExt]], ConsumeStatus]
OrderlyListener = Callable[[list[MessageExt]], ConsumeOrderlyStatus]

S = TypeVar("S", ConsumeStatus, ConsumeOrderlyStatus)


def invoke(
    listener: Callable[[list[MessageExt]], object],
    messages: list[MessageExt],
    *,
    group: str,
    queue: MessageQueue,
    failed: S,
) -> S:
    """Call `listener` (in a pool thread); an exception or an answer of the wrong type counts as `failed`."""
    try:
        status = listener(messages)
    except Exception:
        log.exception(
            "the listener of group %s raised on %d message(s) of topic %s, queue %s@%d (first offset %d); "
            "counted as %s",
            group,
            len(messages),
            queue.topic,
            queue.broker_name,
            queue.queue_id,
            messages[0].queue_offset,
            failed.name,
        )
        return failed
    if not isinstance(status, type(failed)):
        log.warning(
            "the listener of group %s returned %r for topic %s, queue %s@%d, not a %s; counted as %s",
            group,
            status,
            queue.topic,
            queue.broker_name,
            queue.queue_id,
            type(failed).__name__,
            failed.name,
        )
        return failed
    return status
