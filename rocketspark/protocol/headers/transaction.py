"""Headers of END_TRANSACTION (37) and CHECK_TRANSACTION_STATE (39), Apache RocketMQ 4.x's fields.

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
