"""Java's `String.hashCode`, scalar and vectorized over Arrow string arrays.

RocketMQ uses it for tag codes in consume queues (and subscriptions' code sets), for index keys,
and producers use it to pick a queue by sharding key, so it must match Java exactly: the hash runs
over UTF-16 code units with 32-bit overflow.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_MASK32 = 0xFFFFFFFF


def java_string_hash(text: str) -> int:
    """`String.hashCode()`: a signed 32-bit int."""
    h = 0
    utf16 = text.encode("utf-16-be")
    for i in range(0, len(utf16), 2):
        h = (31 * h + ((utf16[i] << 8) | utf16[i + 1])) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


def java_string_hash_array(strings: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Vectorized `String.hashCode()` of every element (int64; null and "" give 0).

    Strings of equal length are hashed together with Horner's rule over a 2-D view (one numpy step
    per character position, wrapping in uint32 as Java's int does); the rare non-ASCII strings
    (where bytes are not UTF-16 units) fall back to the scalar function.
    """
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks() if strings.num_chunks else pa.array([], pa.string())
    strings = strings.cast(pa.string())
    n = len(strings)
    result = np.zeros(n, dtype=np.int64)
    if n == 0:
        return result
    filled = pc.fill_null(strings, "")
    offsets = np.frombuffer(filled.buffers()[1], dtype=np.int32, count=n + 1, offset=filled.offset * 4)
    start, end = int(offsets[0]), int(offsets[-1])
    if end == start:
        return result
    data = np.frombuffer(filled.buffers()[2], dtype=np.uint8, count=end - start, offset=start)
    starts = offsets[:-1] - start
    lengths = np.diff(offsets)
    ascii_only = int(data.max()) < 0x80
    distinct = np.unique(lengths)
    for length in distinct:
        if length == 0:
            continue
        if len(distinct) == 1:  # all of one length: the data buffer is already the matrix
            rows = np.arange(n)
            chars = data.reshape(n, int(length))
        else:
            rows = np.flatnonzero(lengths == length)
            chars = data[starts[rows, None] + np.arange(length)]  # (rows, length)
        h = np.zeros(len(rows), dtype=np.uint32)
        for column in range(int(length)):
            h *= np.uint32(31)
            h += chars[:, column]
        result[rows] = h.view(np.int32)
        if not ascii_only:
            for i in rows[(chars >= 0x80).any(axis=1)]:
                result[i] = java_string_hash(filled[int(i)].as_py())
    return result
