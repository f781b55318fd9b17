"""Arrow arrays worked on through their buffers, and a schema check, for the batch conversions and the codec.

Binary and string columns are handled through their offsets and data buffer: values are located
with numpy and cut out as new arrays with one memcpy each, never with a Python loop over rows.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def offsets_and_buffer(array: pa.Array) -> tuple[np.ndarray, pa.Buffer]:
    """(int64 offsets of each value into the data buffer, n + 1 of them; the data buffer).

    For binary and string arrays (32-bit offsets). The offsets account for slicing, so value i
    is ``buffer[offsets[i]:offsets[i + 1]]``.
    """
    n = len(array)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=n + 1, offset=array.offset * 4)
    data = array.buffers()[2]
    return offsets.astype(np.int64), data if data is not None else pa.py_buffer(b"")


def binary_from_ranges(
    buffer: pa.Buffer, starts: np.ndarray, ends: np.ndarray, type_: pa.DataType, null: np.ndarray | None = None
) -> pa.Array:
    """The byte ranges ``buffer[starts[i]:ends[i]]`` as a new binary or string array.

    The ranges must be in ascending order and must not overlap. The buffer is viewed as an array
    whose values alternate between the wanted ranges and the gaps between them; taking the even
    values copies the ranges with one memcpy each. Values are null where the boolean array `null`
    is true (their ranges must keep the order all the same). Strings are not checked for valid
    UTF-8: call ``validate(full=True)`` on the result when the bytes come from outside.
    """
    n = len(starts)
    if n == 0:
        return pa.array([], type_)
    bounds = np.empty(2 * n, dtype=np.int64)
    bounds[0::2] = starts
    bounds[1::2] = ends
    spread_type = pa.large_string() if pa.types.is_string(type_) else pa.large_binary()
    spread = pa.Array.from_buffers(spread_type, 2 * n - 1, [None, pa.py_buffer(bounds), buffer])
    return spread.take(pa.array(np.arange(0, 2 * n - 1, 2), mask=null)).cast(type_)


def fixed_width(values: np.ndarray) -> pa.Array:
    """Each element's raw bytes (of a numpy array, structured ones included) as one value of a
    large_binary array, without a copy: to join with variable-length parts."""
    width = values.dtype.itemsize
    offsets = np.arange(0, (len(values) + 1) * width, width, dtype=np.int64)
    return pa.Array.from_buffers(pa.large_binary(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(values)])


def unsliced_offsets(array: pa.MapArray) -> pa.Array:
    """The offsets of a (possibly sliced) map array, copied: pyarrow takes no mask with sliced offsets."""
    return pa.array(array.offsets.to_numpy())


def first_null(array: pa.Array) -> int:
    return int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])


def require_schema(batch: pa.RecordBatch, schema: pa.Schema, name: str) -> None:
    if not batch.schema.equals(schema):
        raise ValueError(f"expected a batch with {name}, got:\n{batch.schema}")
