"""Arrow IPC streams written for the wire: Arrow sends (client) and Arrow pull answers (broker)."""

from __future__ import annotations

import pyarrow as pa


def ipc_stream(schema: pa.Schema, batches: list[pa.RecordBatch]) -> memoryview:
    """The IPC stream of `batches`, as a view of the Arrow buffer that holds it.

    The stream is sized first (a mock stream counts its bytes and copies nothing), then written into
    a buffer of that size: each byte is copied once, where a growing output stream copies it again
    at each reallocation, and a copy into bytes once more. For 90,000 stored rows (21 MB) that was
    14.5 ms against 2.6 ms. A command sends the view as its `body_view`.
    """
    size = pa.MockOutputStream()
    _write(size, schema, batches)
    buffer = pa.allocate_buffer(size.size())
    _write(pa.FixedSizeBufferWriter(buffer), schema, batches)
    return memoryview(buffer)


def _write(sink: pa.NativeFile, schema: pa.Schema, batches: list[pa.RecordBatch]) -> None:
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
