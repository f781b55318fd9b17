"""END_TRANSACTION (37): a producer's commit or rollback of a half message (broker/transaction/).

Java's producer sends it oneway, after its local transaction and in answer to a check; a
two-way request is answered SUCCESS once the end is stored, or SYSTEM_ERROR, as Apache's
checkPrepareMessage words it, when the header names no half message of the group. An unknown
state (`commitOrRollback` 0) leaves the half message to the check.
"""

from __future__ import annotations

import logging
from typing import Protocol

from broker.context import HasTransactions
from broker.transaction.half import EndKind
from rocketspark.message import sysflag
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.transaction import EndTransactionRequestHeader
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable

log = logging.getLogger(__name__)

_KINDS = {sysflag.TRANSACTION_COMMIT_TYPE: EndKind.COMMIT, sysflag.TRANSACTION_ROLLBACK_TYPE: EndKind.ROLLBACK}


class EndTransactionContext(HasTransactions, Protocol):
    """What EndTransactionProcessor reads of the broker."""


class EndTransactionProcessor:
    def __init__(self, broker: EndTransactionContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.END_TRANSACTION, self.process)

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
        remark = await self.broker.transactions.end(header, kind)
        log.debug("producer %s%s: %s", connection.remote_address, check, remark)
        return request.response(ResponseCode.SUCCESS, remark)
