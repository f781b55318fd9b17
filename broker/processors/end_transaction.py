"""END_TRANSACTION (37): a producer's commit or rollback of a half message (broker/transaction/).

Java's producer sends it oneway, after its local transaction and in answer to a check; a
two-way request is answered SUCCESS once the end is stored, or SYSTEM_ERROR, as Apache's
checkPrepareMessage words it, when the header names no half message of the group. An unknown
state (`commitOrRollback` 0) leaves the half message to the check. With ACL on, ending a half
message needs PUB on its real topic (read from the half message itself, not from the header).
"""

from __future__ import annotations

import logging
from typing import Protocol

from broker.acl.guard import late_refusal, needs_checking
from broker.acl.resources import end_transaction_needs
from broker.context import HasStore, HasTransactions
from broker.transaction.half import EndKind
from rocketspark.message import sysflag
from rocketspark.message.properties import codec as props
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.transaction import EndTransactionRequestHeader
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable

log = logging.getLogger(__name__)

_KINDS = {sysflag.TRANSACTION_COMMIT_TYPE: EndKind.COMMIT, sysflag.TRANSACTION_ROLLBACK_TYPE: EndKind.ROLLBACK}


class EndTransactionContext(HasTransactions, HasStore, Protocol):
    """What EndTransactionProcessor reads of the broker."""


class EndTransactionProcessor:
    def __init__(self, broker: EndTransactionContext) -> None:
        self.broker = broker
        self._table = ProcessorTable()

    def register(self, table: ProcessorTable) -> None:
        self._table = table
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
