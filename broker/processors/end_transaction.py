"""END_TRANSACTION (37): a producer's commit or rollback of a half message (broker/transaction/),
and END_TRANSACTION_RANGE (31005, this project's): those of one transaction in a half-queue range.

Java's producer sends END_TRANSACTION oneway, after its local transaction and in answer to a check;
a two-way request is answered SUCCESS once the end is stored, or SYSTEM_ERROR, as Apache's
checkPrepareMessage words it, when the header names no half message of the group. An unknown
state (`commitOrRollback` 0) leaves the half message to the check. With ACL on, ending a half
message needs PUB on its real topic (read from the half message itself, not from the header).
END_TRANSACTION_RANGE ends a step of the range per request and answers where to go on
(docs/protocol.md, "Extensions"); off with arrowEnable=false, as the other extensions.
"""

from __future__ import annotations

import logging
from typing import Protocol

from broker.acl.guard import late_refusal, needs_checking
from broker.acl.resources import end_transaction_needs
from broker.context import HasConfig, HasStore, HasTransactions
from broker.transaction.half import EndKind
from rocketspark.errors import ValidationError
from rocketspark.message import sysflag
from rocketspark.message.properties import codec as props
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.transaction import (
    EndTransactionRangeRequestHeader,
    EndTransactionRangeResponseHeader,
    EndTransactionRequestHeader,
)
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable

log = logging.getLogger(__name__)

_KINDS = {sysflag.TRANSACTION_COMMIT_TYPE: EndKind.COMMIT, sysflag.TRANSACTION_ROLLBACK_TYPE: EndKind.ROLLBACK}


class EndTransactionContext(HasTransactions, HasStore, HasConfig, Protocol):
    """What EndTransactionProcessor reads of the broker."""


class EndTransactionProcessor:
    def __init__(self, broker: EndTransactionContext) -> None:
        self.broker = broker
        self._table = ProcessorTable()

    def register(self, table: ProcessorTable) -> None:
        self._table = table
        table.register(RequestCode.END_TRANSACTION, self.process)
        if self.broker.config.arrow_enable:
            table.register(ExtensionCode.END_TRANSACTION_RANGE, self.process_range)

    async def process(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(EndTransactionRequestHeader)
        check = " (answering a check)" if header.from_transaction_check else ""
        kind = _KINDS.get(header.commit_or_rollback)
        if kind is None:
            if header.commit_or_rollback != sysflag.TRANSACTION_NOT_TYPE:
                return request.response(
                    ResponseCode.SYSTEM_ERROR, f"commitOrRollback {header.commit_or_rollback} is no transaction state"
                )
            log.info("producer %s%s: half message %s state unknown", connection.remote_address, check, header.msg_id)
            return request.response(ResponseCode.SUCCESS, "state unknown: the half message waits for the check")
        if needs_checking(self._table):
            row = await self.broker.store.message_at(header.commit_log_offset)
            if row is not None:
                real_topic = props.decode_properties(row["properties"]).get(props.REAL_TOPIC) or str(row["topic"])
                refusal = late_refusal(self._table, connection, request, end_transaction_needs(real_topic))
                if refusal is not None:
                    return request.response(ResponseCode.NO_PERMISSION, refusal)
        remark = await self.broker.transactions.end(header, kind)
        log.debug("producer %s%s: %s", connection.remote_address, check, remark)
        return request.response(ResponseCode.SUCCESS, remark)

    async def process_range(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(EndTransactionRangeRequestHeader)
        kind = _KINDS.get(header.commit_or_rollback)
        if kind is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"commitOrRollback {header.commit_or_rollback} is no commit or rollback"
            )

        def permit(topics: list[str]) -> None:
            for topic in topics:
                refusal = late_refusal(self._table, connection, request, end_transaction_needs(topic))
                if refusal is not None:
                    raise ValidationError(refusal, code=ResponseCode.NO_PERMISSION)

        checked = permit if needs_checking(self._table) else None
        next_offset, count = await self.broker.transactions.end_range(header, kind, checked)
        log.debug(
            "producer %s: %s of %d half messages of transaction %s up to offset %d",
            connection.remote_address,
            kind.value,
            count,
            header.transaction_id,
            next_offset,
        )
        return request.response(ResponseCode.SUCCESS, header=EndTransactionRangeResponseHeader(next_offset, count))
