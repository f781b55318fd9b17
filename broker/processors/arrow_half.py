"""ARROW_SEND_HALF_MESSAGE (31004): an Arrow batch of half messages of one transaction (docs/protocol.md).

This project's extension, beside the Arrow send: Apache RocketMQ takes no transactional message in a
batch, so a standard producer sends each half message alone. The headers are ARROW_SEND_MESSAGE's;
their `properties` (RocketMQ's string form) go onto every row and must hold TRAN_MSG=true and PGROUP,
as a single half message's do. The batch is stored whole, its rows consecutive, in queue 0 of
RMQ_SYS_TRANS_HALF_TOPIC, each row with REAL_TOPIC and REAL_QID naming the header's topic and queue,
as broker/transaction/half.py stores a single one, and `__transactionId__` the header properties'
(else, as for a single one, its own UNIQ_KEY): END_TRANSACTION_RANGE ends a transaction's rows by
that, and the broker remembers the batch (broker/transaction/range_end.py). Every row needs its
UNIQ_KEY. The answer is the Arrow send's, its `queueId` the real queue (as a half message's answer names
the queue it was sent to) and `queueOffset` the first row's half-queue offset. Off with
arrowEnable=false (so on flavor=apache too), as the other extensions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from broker.context import HasConfig, HasStats, HasStore, HasStoreConfig, HasTopics, HasTransactions
from broker.processors.arrow import ArrowSendProcessor, read_producer_batch
from broker.processors.send import resolve_send_queue
from broker.store.results import PutResult
from broker.transaction.half import immunity_seconds, is_half
from broker.transaction.range_end import HalfBatch
from rocketspark.errors import ValidationError
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import TRANS_HALF_TOPIC, validate_encoded_properties
from rocketspark.protocol.codes import ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.send import SendMessageRequestHeader
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable


class ArrowHalfSendContext(HasConfig, HasStoreConfig, HasTopics, HasStore, HasStats, HasTransactions, Protocol):
    """What ArrowHalfSendProcessor reads of the broker."""


def _illegal(reason: str) -> ValidationError:
    return ValidationError(reason, code=ResponseCode.MESSAGE_ILLEGAL)


def half_properties(
    rows: pa.StringArray, header: SendMessageRequestHeader, queue_id: int, uniq_keys: pa.Array
) -> tuple[pa.StringArray, HalfBatch | None]:
    """Each row's stored properties: its own, then the header's and the real topic and queue; its
    `__transactionId__` the header's (and the batch as the broker remembers it: offsets to be filled
    in), else its own UNIQ_KEY."""
    common = props.decode_properties(header.properties or "")
    if not is_half(common):
        raise _illegal("a batch of half messages must carry TRAN_MSG=true in the header's properties")
    group = common.get(props.PRODUCER_GROUP)
    if not group:
        raise _illegal("a batch of half messages must name its producer group in the header's PGROUP property")
    if common.get(props.DELAY_TIME_LEVEL, "0") not in ("", "0"):
        raise _illegal("a half message may not be delayed (DELAY)")
    if uniq_keys.null_count:
        raise _illegal("every half message of a batch needs its UNIQ_KEY")
    real = {props.REAL_TOPIC: header.topic, props.REAL_QUEUE_ID: str(queue_id)}
    transaction_id = common.get(props.TRANSACTION_ID)
    suffix = props.encode_properties({**common, **real})
    if transaction_id is not None:
        stored = pc.binary_join_element_wise(rows, suffix, "")
        kept = props.encode_properties({k: v for k, v in common.items() if k != props.TRANSACTION_PREPARED})
        remembered = HalfBatch(
            0,
            0,
            group,
            transaction_id,
            header.topic,
            queue_id,
            header.born_timestamp,
            suffix.encode(),
            kept,
            immunity_seconds(common),
        )
    else:
        per_row = pc.binary_join_element_wise(
            f"{props.TRANSACTION_ID}{props.NAME_VALUE_SEPARATOR}", uniq_keys, props.PROPERTY_SEPARATOR, ""
        )
        stored = pc.binary_join_element_wise(rows, suffix, per_row, "")
        remembered = None
    longest = pc.max(pc.binary_length(stored)).as_py()
    if longest is not None and longest > props.MAX_PROPERTIES_LENGTH:
        raise _illegal(f"a half message's properties take {longest:,} bytes; at most {props.MAX_PROPERTIES_LENGTH:,}")
    return stored, remembered


class ArrowHalfSendProcessor(ArrowSendProcessor):
    def __init__(self, broker: ArrowHalfSendContext) -> None:
        super().__init__(broker)
        self.half_broker = broker

    def register(self, table: ProcessorTable) -> None:
        if self.broker.config.arrow_enable:
            table.register(ExtensionCode.ARROW_SEND_HALF_MESSAGE, self.process)

    def process(self, connection: Connection, request: RemotingCommand) -> Awaitable[RemotingCommand]:
        """Check and queue the batch before returning, as the Arrow send."""
        header = request.decode_header(SendMessageRequestHeader)
        _, queue_id = resolve_send_queue(self.broker, header, connection)
        validate_encoded_properties(header.properties or "")
        checked = read_producer_batch(request.body, self.broker.store_config.max_message_size)
        batch = checked.batch
        properties, remembered = half_properties(checked.properties, header, queue_id, batch.column("uniq_key"))
        # as Apache's TransactionalMessageBridge: the half topic's config comes with the first half message
        self.broker.topics.create_internal_topic(TRANS_HALF_TOPIC, 1)
        stored = self.broker.store.put_arrow(
            TRANS_HALF_TOPIC,
            0,
            batch,
            properties=properties,
            born_timestamp=header.born_timestamp,
            born_host=connection.remote_address,
        )
        return self._answer(request, self._stored(stored, queue_id, remembered))

    async def _stored(self, stored: Awaitable[PutResult], queue_id: int, remembered: HalfBatch | None) -> PutResult:
        """The result in the real queue, as a half message's answer names it; the batch remembered."""
        result = await stored
        if remembered is not None and result.count:
            placed = dataclasses.replace(remembered, first=result.first_queue_offset, count=result.count)
            self.half_broker.transactions.remember(placed)
        return dataclasses.replace(result, queue_id=queue_id)
