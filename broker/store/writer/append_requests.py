"""What the commit log writer takes in: a send's messages for one queue (its answer: writer/commit_round.py)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from broker.store.results import PutResult
from rocketspark.message.properties import codec as props
from rocketspark.message.validation import validate_encoded_properties


@dataclass(frozen=True, slots=True)
class StandardMessage:
    """One message of a standard send, as its request carried it."""

    body: bytes
    properties: str  # RocketMQ's encoded form, system properties included
    tags: str | None = None  # from the properties, parsed by the processor
    keys: str | None = None
    uniq_key: str | None = None
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = ""
    reconsume_times: int = 0
    wait_store_ok: bool = True

    @classmethod
    def from_stored(cls, row: Mapping[str, Any], *, reconsume_times: int | None = None) -> StandardMessage:
        """A stored message (a STORED_SCHEMA row) to store again, unacknowledged by a flush; with
        `reconsume_times` instead of its own."""
        return cls(
            body=row["body"],
            properties=row["properties"],
            tags=row["tags"],
            keys=row["keys"],
            uniq_key=props.decode_properties(row["properties"]).get(props.UNIQ_KEY),
            flag=row["flag"],
            sys_flag=row["sys_flag"],
            born_timestamp=row["born_timestamp"],
            born_host=row["born_host"],
            reconsume_times=row["reconsume_times"] if reconsume_times is None else reconsume_times,
            wait_store_ok=False,
        )

    def with_properties(self, changes: Mapping[str, str | None]) -> StandardMessage:
        """A copy whose properties have `changes` applied (None removes a key); ValidationError
        (MESSAGE_ILLEGAL) when they no longer fit a record."""
        properties = props.decode_properties(self.properties)
        for key, value in changes.items():
            if value is None:
                properties.pop(key, None)
            else:
                properties[key] = value
        encoded = props.encode_properties(properties)
        validate_encoded_properties(encoded)
        return dataclasses.replace(self, properties=encoded)


@dataclass(frozen=True, slots=True)
class StandardBatchFields:
    """What a standard batch send (SEND_BATCH_MESSAGE), stored as a producer Arrow batch, adds to
    it: each row's flag, the send's sys flag and reconsume times, and whether it waits for the
    flush. Such a send is answered with every row's offset, as standard sends are."""

    flags: np.ndarray  # int32
    sys_flag: int = 0
    reconsume_times: int = 0
    wait_flush: bool = True


@dataclass(eq=False)
class AppendRequest:
    """Messages for one queue: standard messages (one or a batch), or one producer Arrow batch."""

    topic: str
    queue_id: int
    future: asyncio.Future[PutResult]
    messages: list[StandardMessage] | None = None
    arrow: pa.RecordBatch | None = None  # PRODUCER_SCHEMA
    arrow_properties: pa.StringArray | None = None  # encode_properties_column of `arrow`, when checked already
    born_timestamp: int = 0  # for Arrow batches: the send's born time and host apply to every row
    born_host: str = ""
    standard: StandardBatchFields | None = None  # for an Arrow batch taken from a standard batch send
    wait_flush: bool = True  # a standard batch's own when `standard` is given
    # the writer's, set when it queues the request; nothing else changes a request once made
    enqueued_at: float = field(default=0.0, init=False)  # event loop time
    key_hashes: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False)  # Arrow: UNIQ_KEY hashes
    # computed once: the writer reads them many times a round (plain attributes, not properties)
    count: int = field(init=False)
    body_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        if self.standard is not None:
            self.wait_flush = self.standard.wait_flush
        if self.messages is not None:
            self.count = len(self.messages)
            self.body_bytes = sum(len(m.body) for m in self.messages)
        else:
            assert self.arrow is not None
            self.count = int(self.arrow.num_rows)
            self.body_bytes = int(self.arrow.column("body").nbytes or 0)
