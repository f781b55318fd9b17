"""Headers of PULL_MESSAGE (11); the Arrow pull uses the same headers."""

from __future__ import annotations

from dataclasses import dataclass

from rocketspark.protocol.header import CommandHeader

# PullSysFlag bits
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_CLASS_FILTER = 0x8
FLAG_LITE_PULL = 0x10


@dataclass(slots=True)
class PullMessageRequestHeader(CommandHeader):
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    sub_version: int
    subscription: str | None = None
    expression_type: str | None = None
    max_msg_bytes: int | None = None

    def check(self) -> None:
        if self.max_msg_nums <= 0:
            raise self.field_error("max_msg_nums", "must be at least 1")
        if self.queue_id < 0:
            raise self.field_error("queue_id", "must not be negative")
        if self.max_msg_bytes is not None and self.max_msg_bytes < 0:
            raise self.field_error("max_msg_bytes", "must not be negative")
        if self.suspend_timeout_millis < 0:
            raise self.field_error("suspend_timeout_millis", "must not be negative")

    @property
    def suspend(self) -> bool:
        return bool(self.sys_flag & FLAG_SUSPEND)

    @property
    def commits_offset(self) -> bool:
        return bool(self.sys_flag & FLAG_COMMIT_OFFSET)

    @property
    def has_subscription(self) -> bool:
        return bool(self.sys_flag & FLAG_SUBSCRIPTION)


@dataclass(slots=True)
class PullMessageResponseHeader(CommandHeader):
    """All four fields are sent with every status: clients read them unconditionally."""

    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
