"""Transactions of 5.x producers: transaction ids, EndTransaction, and the check over Telemetry.

A TRANSACTION send stores a half message through the 4.x path (broker/transaction/): its answer's
`transaction_id` names the half message itself, the offset msgId of its commit log offset followed by
its queue offset in RMQ_SYS_TRANS_HALF_TOPIC (16 hex digits), so EndTransaction needs no table in
memory and works after a restart, as a 4.x END_TRANSACTION does with the same two offsets. The
producer group of a 5.x half message is its topic (Apache's proxy does the same), so the broker's
check asks the producers registered for that topic: their channel (broker/grpc/clients.py) turns
CHECK_TRANSACTION_STATE into a `recover_orphaned_transaction_command` on their Telemetry stream, and
their EndTransaction with source SERVER_CHECK ends the half message.
"""

from __future__ import annotations

from typing import Protocol

from broker.context import HasStore, HasTransactions
from broker.grpc.call import Call
from broker.grpc.messages import message_of
from broker.grpc.status import StatusError, ok
from broker.grpc.v2 import definition_pb2 as pb
from broker.grpc.v2 import service_pb2 as service
from broker.transaction.half import EndKind
from rocketspark.errors import RocketMQError, ValidationError
from rocketspark.message import sysflag
from rocketspark.message.ids import decode_offset_msg_id, offset_msg_id
from rocketspark.message.records.scalar import record_bounds, stored_rows
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.transaction import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from rocketspark.remoting.throttled_log import escaped

_HALF_OFFSET_DIGITS = 16
_RESOLUTIONS = {
    pb.COMMIT: (EndKind.COMMIT, sysflag.TRANSACTION_COMMIT_TYPE),
    pb.ROLLBACK: (EndKind.ROLLBACK, sysflag.TRANSACTION_ROLLBACK_TYPE),
}


class TransactionContext(HasTransactions, HasStore, Protocol):
    """What the 5.x transactions read of the broker."""


def transaction_id(store_host: str, commit_log_offset: int, half_offset: int) -> str:
    return f"{offset_msg_id(store_host, commit_log_offset)}{half_offset:0{_HALF_OFFSET_DIGITS}X}"


def half_message_of(value: str) -> tuple[int, int]:
    """(commit log offset, half queue offset) of a transaction id (INVALID_TRANSACTION_ID if it is none)."""
    try:
        _, commit_log_offset = decode_offset_msg_id(value[:-_HALF_OFFSET_DIGITS])
        half_offset = int(value[-_HALF_OFFSET_DIGITS:], 16)
    except ValueError:
        raise StatusError(
            pb.INVALID_TRANSACTION_ID,
            f"{escaped(value)} is not a transaction id this broker gave: use the one the send answered",
        ) from None
    return commit_log_offset, half_offset


class Transactions:
    def __init__(self, broker: TransactionContext) -> None:
        self._broker = broker

    def transaction_id(self, commit_log_offset: int, half_offset: int) -> str:
        return transaction_id(self._broker.store.store_host, commit_log_offset, half_offset)

    async def end(self, request: service.EndTransactionRequest, call: Call) -> service.EndTransactionResponse:
        topic = call.topic(request.topic)
        if not request.transaction_id:
            raise StatusError(pb.INVALID_TRANSACTION_ID, "the request has no transaction_id")
        commit_log_offset, half_offset = half_message_of(request.transaction_id)
        resolution = _RESOLUTIONS.get(request.resolution)
        if resolution is None:  # unknown: as a 4.x producer's UNKNOW, the check asks again later
            return service.EndTransactionResponse(
                status=pb.Status(code=pb.OK, message="resolution unspecified: the half message waits for the check")
            )
        kind, flag = resolution
        header = EndTransactionRequestHeader(
            producer_group=topic,
            tran_state_table_offset=half_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=flag,
            msg_id=request.message_id,
            from_transaction_check=request.source == pb.SOURCE_SERVER_CHECK,
            transaction_id=request.transaction_id,
            topic=topic,
        )
        try:
            await self._broker.transactions.end(header, kind)
        except ValidationError as exc:
            if exc.code != ResponseCode.SYSTEM_ERROR:
                raise
            raise StatusError(pb.INVALID_TRANSACTION_ID, str(exc)) from None
        return service.EndTransactionResponse(status=ok())

    def recover_command(self, request: RemotingCommand) -> service.TelemetryCommand | None:
        """The Telemetry command that carries a check (CHECK_TRANSACTION_STATE) to a 5.x producer;
        None for the other requests the broker sends clients (5.x clients have no use for them)."""
        if request.code != RequestCode.CHECK_TRANSACTION_STATE:
            return None
        header = request.decode_header(CheckTransactionStateRequestHeader)
        body = request.body or b""
        try:
            (row,) = stored_rows(body, record_bounds(body)[:-1], decompress=True)
        except (RocketMQError, ValueError) as exc:
            raise ValidationError(f"the check's message does not decode: {exc}") from exc
        command = service.RecoverOrphanedTransactionCommand(
            message=message_of(row, store_host=self._broker.store.store_host),
            transaction_id=self.transaction_id(header.commit_log_offset, header.tran_state_table_offset),
        )
        return service.TelemetryCommand(recover_orphaned_transaction_command=command)
