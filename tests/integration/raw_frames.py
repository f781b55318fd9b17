"""Requests as raw frames over a plain socket: nothing of the client library checks or retries them."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Self

import pyarrow as pa

from rocketspark.message.batches.schema import PRODUCER_SCHEMA
from rocketspark.protocol.codec import FrameDecoder, encode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.send import SendMessageRequestHeader


def arrow_send_request(header: SendMessageRequestHeader, batch: pa.RecordBatch) -> RemotingCommand:
    """An ARROW_SEND_MESSAGE request for `batch`, whatever it holds (no client-side checks)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return RemotingCommand.request(ExtensionCode.ARROW_SEND_MESSAGE, header, bytes(sink.getvalue()))


def producer_rows(bodies: list[bytes], *, keys: list[str | None] | None = None) -> pa.RecordBatch:
    """A PRODUCER_SCHEMA batch built directly with pyarrow, bypassing the client's conversions."""
    n = len(bodies)
    return pa.record_batch(
        [
            pa.array(bodies, pa.binary()),
            pa.nulls(n, pa.string()),
            pa.array(keys if keys is not None else [None] * n, pa.string()),
            pa.nulls(n, pa.string()),
            pa.nulls(n, PRODUCER_SCHEMA.field("properties").type),
        ],
        schema=PRODUCER_SCHEMA,
    )


class RawConnection:
    """One TCP connection that writes encoded commands and reads the responses by opaque."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._decoder = FrameDecoder()
        self._answers: dict[int, RemotingCommand] = {}

    async def __aenter__(self) -> Self:
        host, port = self.address.rsplit(":", 1)
        self._reader, self._writer = await asyncio.open_connection(host, int(port))
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._writer is not None
        self._writer.close()
        await self._writer.wait_closed()

    def write(self, *requests: RemotingCommand) -> None:
        """Write `requests` in one write, so that the peer most likely reads them together."""
        assert self._writer is not None
        self._writer.write(b"".join(encode(request) for request in requests))

    async def responses(self, opaques: list[int], timeout_s: float = 10.0) -> list[RemotingCommand]:
        """The responses to the requests with `opaques`, in that order, within `timeout_s`."""
        assert self._reader is not None
        async with asyncio.timeout(timeout_s):
            while not all(o in self._answers for o in opaques):
                data = await self._reader.read(1 << 16)
                if not data:
                    raise ConnectionError(f"{self.address} closed the connection")
                for command in self._decoder.feed(data):
                    self._answers[command.opaque] = command
        return [self._answers.pop(o) for o in opaques]

    async def invoke(self, request: RemotingCommand, timeout_s: float = 10.0) -> RemotingCommand:
        self.write(request)
        (response,) = await self.responses([request.opaque], timeout_s)
        return response
