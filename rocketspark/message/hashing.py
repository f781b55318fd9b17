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


def _powers_of_31(count: int) -> np.ndarray:
    powers = np.empty(max(count, 1), dtype=np.uint32)
    powers[0] = 1
    if count > 1:
        # 31^k mod 2^32, computed with wrapping uint32 multiplication
        powers[1:] = 31
        np.multiply.accumulate(powers[1:], out=powers[1:])
    return powers


def java_string_hash_array(strings: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Vectorized `String.hashCode()` of every element (int64; null and "" give 0).

    ASCII strings (one byte = one UTF-16 unit) are hashed with numpy; the rare others fall
    back to the scalar function.
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
    data_buffer = filled.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8, count=end - start, offset=start) if end > start else None
    if data is None:
        return result
    lengths = np.diff(offsets)
    local_starts = offsets[:-1] - start
    # exponent of each byte: distance to the end of its own string, minus one
    string_of_byte = np.repeat(np.arange(n), lengths)
    exponents = (offsets[1:] - start)[string_of_byte] - 1 - np.arange(end - start)
    terms = data.astype(np.uint32) * _powers_of_31(int(lengths.max()))[exponents]
    non_empty = lengths > 0
    sums = np.add.reduceat(terms, local_starts[non_empty]).astype(np.uint32) if non_empty.any() else None
    if sums is not None:
        result[non_empty] = sums.view(np.int32)
    non_ascii = np.zeros(n, dtype=bool)
    high = data >= 0x80
    if high.any():
        non_ascii[np.unique(string_of_byte[high])] = True
        for i in np.flatnonzero(non_ascii):
            result[i] = java_string_hash(filled[i].as_py())
    return result
