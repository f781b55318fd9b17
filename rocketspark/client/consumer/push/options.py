"""Push consumer options, with Apache RocketMQ's `DefaultMQPushConsumer` defaults (snake_case)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocketspark.client.consumer import allocation
from rocketspark.errors import ValidationError
from rocketspark.message.validation import DEFAULT_MAX_RECONSUME_TIMES
from rocketspark.protocol.body.heartbeat import ConsumeFromWhere, MessageModel


@dataclass(frozen=True, slots=True)
class PushOptions:
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    #: CONSUME_FROM_TIMESTAMP's start; None: 30 minutes before the consumer was created
    consume_timestamp_ms: int | None = None
    message_model: MessageModel = MessageModel.CLUSTERING
    allocate_strategy: str = "AVG"
    pull_batch_size: int = 32
    #: pulling a queue pauses while it holds this many messages not yet consumed...
    pull_threshold_for_queue: int = 1000
    #: ... or this many MiB of their bodies
    pull_threshold_size_for_queue: int = 100
    #: concurrent mode: ... or while its first and last offsets in flight are further apart than this
    consume_concurrently_max_span: int = 2000
    consume_message_batch_max_size: int = 1
    #: accepted for Java parity; the pool starts threads on demand up to `consume_thread_max`
    consume_thread_min: int = 20
    consume_thread_max: int = 20
    #: how long the broker holds a pull that found nothing (long polling)
    broker_suspend_max_time_ms: int = 15_000
    #: the timeout of such a pull
    consumer_timeout_ms_when_suspend: int = 30_000
    pull_delay_on_error_ms: int = 3_000
    #: concurrent clustering: a failed message goes to the group's dead-letter topic once it was
    #: consumed this many times again (Java's default for concurrent consumers)
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES
    #: concurrent mode: the pause before a failed message that could not go back to the broker (and
    #: every failed message in broadcasting) is handed to the listener again
    reconsume_later_delay_ms: int = 5_000
    #: orderly mode: the pause before a batch answered SUSPEND_CURRENT_QUEUE_A_MOMENT is retried
    suspend_current_queue_time_ms: int = 1_000
    rebalance_interval_ms: int = 20_000
    #: orderly clustering: how often the broker locks of the owned queues are renewed
    rebalance_lock_interval_ms: int = 20_000
    #: broadcasting: offsets go to `<offset_store_dir>/<client id>/<group>/offsets.json`
    offset_store_dir: Path | None = None

    def __post_init__(self) -> None:
        positive = [f.name for f in dataclasses.fields(self) if f.type == "int"]
        bad = [name for name in positive if getattr(self, name) <= 0]
        if bad:
            raise ValidationError(f"push consumer options must be positive: {', '.join(bad)}")
        if self.consume_thread_min > self.consume_thread_max:
            raise ValidationError(
                f"consume_thread_min ({self.consume_thread_min}) exceeds consume_thread_max ({self.consume_thread_max})"
            )
        if self.consumer_timeout_ms_when_suspend <= self.broker_suspend_max_time_ms:
            raise ValidationError("consumer_timeout_ms_when_suspend must exceed broker_suspend_max_time_ms")
        try:
            allocation.strategy(self.allocate_strategy)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None

    @classmethod
    def of(cls, options: dict[str, Any]) -> PushOptions:
        """Options from keywords; an unknown one is a ValidationError naming the known ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValidationError(
                f"unknown push consumer option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return cls(**options)
