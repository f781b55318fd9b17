"""The Arrow send (docs/protocol.md): a batch of messages as an Arrow IPC stream, stored per batch.

Headers are those of SEND_MESSAGE; the broker answers with where the first message went and how
many were stored. A malformed stream is refused as a whole: nothing of it is stored. (The Arrow
pull is served by the pull processor.)
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import NamedTuple, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from broker.context import HasConfig, HasStats, HasStore, HasStoreConfig, HasTopics
from broker.processors.send import resolve_send_queue
from broker.store.results import PutResult, PutStatus
from rocketspark.errors import ValidationError
from rocketspark.message.batches.schema import PRODUCER_SCHEMA
from rocketspark.message.properties.columns import encode_properties_column
from rocketspark.message.validation import validate_user_property_keys
from rocketspark.protocol.codes import ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.send import ArrowSendResponseHeader, SendMessageRequestHeader
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable


class ArrowSendContext(HasConfig, HasStoreConfig, HasTopics, HasStore, HasStats, Protocol):
    """What ArrowSendProcessor reads of the broker."""


class ProducerBatch(NamedTuple):
    """A checked Arrow send: the PRODUCER_SCHEMA batch and the properties string of each row."""

    batch: pa.RecordBatch
    properties: pa.StringArray


def _illegal(reason: str) -> ValidationError:
    return ValidationError(reason, code=ResponseCode.MESSAGE_ILLEGAL)


def read_producer_batch(body: bytes, max_message_size: int) -> ProducerBatch:
    """The one PRODUCER_SCHEMA batch in an Arrow IPC stream, checked completely.

    Everything that could make storing it fail is checked here, before the batch joins a group
    commit round: a bad batch must be refused alone, not fail the sends it would share a round with.
    """
    try:
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise _illegal(f"the Arrow send body is not an Arrow IPC stream: {exc}") from None
    if not table.schema.equals(PRODUCER_SCHEMA):
        raise _illegal(f"the Arrow send body has schema {table.schema}; expected {PRODUCER_SCHEMA}")
    if table.num_rows == 0:
        raise _illegal("the Arrow send body holds no message")
    batch = table.combine_chunks().to_batches()[0]
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise _illegal(f"the Arrow send body holds malformed data: {exc}") from None
    _check_bodies(batch.column("body"), max_message_size)
    user = batch.column("properties")
    first, last = user.offsets[0].as_py(), user.offsets[-1].as_py()
    if user.items.slice(first, last - first).null_count:
        raise _illegal("a property value of the Arrow batch is null; properties map names to strings")
    validate_user_property_keys(pc.unique(user.keys.slice(first, last - first)).to_pylist())
    properties = encode_properties_column(
        user, tags=batch.column("tags"), keys=batch.column("keys"), uniq_key=batch.column("uniq_key")
    )
    return ProducerBatch(batch, properties)


def _check_bodies(bodies: pa.Array, max_message_size: int) -> None:
    if bodies.null_count:
        raise _illegal("a message of the Arrow batch has a null body")
    shortest, longest = pc.min_max(pc.binary_length(bodies)).values()
    if shortest.as_py() == 0:
        raise _illegal("a message of the Arrow batch has an empty body")
    if longest.as_py() > max_message_size:
        raise _illegal(
            f"a message body of the Arrow batch is {longest.as_py():,} bytes; the limit is {max_message_size:,} "
            "(maxMessageSize)"
        )


class ArrowSendProcessor:
    def __init__(self, broker: ArrowSendContext) -> None:
        self.broker = broker

    def register(self, table: ProcessorTable) -> None:
        if self.broker.config.arrow_enable:
            table.register(ExtensionCode.ARROW_SEND_MESSAGE, self.process)

    def process(self, connection: Connection, request: RemotingCommand) -> Awaitable[RemotingCommand]:
        """Check and queue the batch before returning, as :meth:`SendMessageProcessor.process`."""
        header = request.decode_header(SendMessageRequestHeader)
        _, queue_id = resolve_send_queue(self.broker, header, connection)
        checked = read_producer_batch(request.body, self.broker.store_config.max_message_size)
        stored = self.broker.store.put_arrow(
            header.topic,
            queue_id,
            checked.batch,
            properties=checked.properties,
            born_timestamp=header.born_timestamp,
            born_host=connection.remote_address,
        )
        return self._answer(request, stored)

    async def _answer(self, request: RemotingCommand, stored: Awaitable[PutResult]) -> RemotingCommand:
        result = await stored
        stats = self.broker.stats
        stats.arrow_send_requests += 1
        stats.arrow_send_messages += result.count
        code = ResponseCode.SUCCESS if result.status is PutStatus.PUT_OK else ResponseCode.FLUSH_DISK_TIMEOUT
        response = request.response(
            code,
            header=ArrowSendResponseHeader(
                result.queue_id, result.first_queue_offset, result.count, result.first_commit_log_offset
            ),
        )
        # rows not stored again: their UNIQ_KEY was stored within duplicateWindowSeconds
        response.ext_fields["duplicateCount"] = str(result.duplicates)
        return response
