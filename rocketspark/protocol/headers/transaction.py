"""Headers of END_TRANSACTION (37) and CHECK_TRANSACTION_STATE (39), Apache RocketMQ 4.x's fields,
and of this project's END_TRANSACTION_RANGE (31005, docs/protocol.md, "Extensions").

`topic` is 5.x's addition, optional both ways. `commitOrRollback` holds a transaction sysflag
(rocketspark.message.sysflag): COMMIT, ROLLBACK or NOT (unknown: the broker keeps the half message).
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketspark.protocol.header import CommandHeader


@dataclass(slots=True)
class EndTransactionRequestHeader(CommandHeader):
    producer_group: str
    tran_state_table_offset: int  # the half message's offset in RMQ_SYS_TRANS_HALF_TOPIC
    commit_log_offset: int  # the half message's commit log offset
    commit_or_rollback: int
    msg_id: str  # the message's UNIQ_KEY
    from_transaction_check: bool | None = None
    transaction_id: str | None = None
    topic: str | None = None


@dataclass(slots=True)
class CheckTransactionStateRequestHeader(CommandHeader):
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None
    topic: str | None = None


@dataclass(slots=True)
class EndTransactionRangeRequestHeader(CommandHeader):
    """End the half messages of `transaction_id` (their `__transactionId__`) and `producer_group`
    (their PGROUP) at half-queue offsets `first_offset`..`last_offset`, in offset order, at most
    `max_messages` of the range's messages read (default: the broker's step)."""

    producer_group: str
    transaction_id: str
    first_offset: int
    last_offset: int
    commit_or_rollback: int
    max_messages: int | None = None


@dataclass(slots=True)
class EndTransactionRangeResponseHeader(CommandHeader):
    """`next_offset`: where to go on (past `last_offset`: the range is done); `count`: the half
    messages of the transaction this request ended or found ended the same way already."""

    next_offset: int
    count: int
