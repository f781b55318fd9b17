"""The Arrow send (docs/protocol.md): a batch of messages as an Arrow IPC stream, stored per batch.

Headers are those of SEND_MESSAGE; the broker answers with where the first message went and how
many were stored. A malformed stream is refused as a whole: nothing of it is stored. (The Arrow
pull is served by the pull processor.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from broker.processors.send import resolve_send_queue
from broker.store.results import PutStatus
from rocketspark.errors import ValidationError
from rocketspark.message.schema import PRODUCER_SCHEMA
from rocketspark.remoting.codes import ResponseCode
from rocketspark.remoting.command import RemotingCommand
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.extension import ExtensionCode
from rocketspark.remoting.headers.send import ArrowSendResponseHeader, SendMessageRequestHeader
from rocketspark.remoting.processor import ProcessorTable

if TYPE_CHECKING:
    from broker.controller import BrokerController


def read_producer_batch(body: bytes, max_message_size: int) -> pa.RecordBatch:
    """The one PRODUCER_SCHEMA batch in an Arrow IPC stream; ValidationError if it is not one."""
    try:
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise ValidationError(
            f"the Arrow send body is not an Arrow IPC stream: {exc}", code=ResponseCode.MESSAGE_ILLEGAL
        ) from None
    if not table.schema.equals(PRODUCER_SCHEMA):
        raise ValidationError(
            f"the Arrow send body has schema {table.schema}; expected {PRODUCER_SCHEMA}",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )
    if table.num_rows == 0:
        raise ValidationError("the Arrow send body holds no message", code=ResponseCode.MESSAGE_ILLEGAL)
    batch = table.combine_chunks().to_batches()[0] if table.num_rows else None
    assert batch is not None
    if batch.column("body").null_count:
        raise ValidationError("a message of the Arrow batch has a null body", code=ResponseCode.MESSAGE_ILLEGAL)
    lengths = pc.binary_length(batch.column("body"))
    shortest, longest = pc.min_max(lengths).values()
    if shortest.as_py() == 0:
        raise ValidationError("a message of the Arrow batch has an empty body", code=ResponseCode.MESSAGE_ILLEGAL)
    if longest.as_py() > max_message_size:
        raise ValidationError(
            f"a message body of the Arrow batch is {longest.as_py():,} bytes; the limit is {max_message_size:,}",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )
    return batch


class ArrowSendProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller

    def register(self, table: ProcessorTable) -> None:
        if self.controller.config.arrow_enable:
            table.register(ExtensionCode.ARROW_SEND_MESSAGE, self.process)

    async def process(self, connection: Connection, request: RemotingCommand) -> RemotingCommand:
        header = request.decode_header(SendMessageRequestHeader)
        _, queue_id = resolve_send_queue(self.controller, header, connection)
        batch = read_producer_batch(request.body, self.controller.store_config.max_message_size)
        result = await self.controller.store.put_arrow(
            header.topic, queue_id, batch, born_timestamp=header.born_timestamp, born_host=connection.remote_address
        )
        stats = self.controller.stats
        stats.arrow_send_requests += 1
        stats.arrow_send_messages += result.count
        code = ResponseCode.SUCCESS if result.status is PutStatus.PUT_OK else ResponseCode.FLUSH_DISK_TIMEOUT
        return request.response(
            code,
            header=ArrowSendResponseHeader(
                result.queue_id, result.first_queue_offset, result.count, result.first_commit_log_offset
            ),
        )
