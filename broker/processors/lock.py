"""Queue locks of orderly consumers: LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42)."""

from __future__ import annotations

from broker.context import HasLocks
from rocketspark.protocol.body.consumer import LockBatchRequestBody, LockBatchResponseBody
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable


class LockProcessor:
    def __init__(self, broker: HasLocks) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        table.register(RequestCode.LOCK_BATCH_MQ, self.lock)
        table.register(RequestCode.UNLOCK_BATCH_MQ, self.unlock)

    def lock(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        body = LockBatchRequestBody.from_json(request.body)
        locked = self.broker.locks.try_lock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.response(body=LockBatchResponseBody(locked).to_json())

    def unlock(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        body = LockBatchRequestBody.from_json(request.body)
        self.broker.locks.unlock_batch(body.consumer_group, body.mq_set, body.client_id)
        return request.response()
