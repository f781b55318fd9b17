"""Columns computed from other columns of a message batch: msgIds, consume-queue tag codes, inflated bodies.

Each works on whole columns with pyarrow compute kernels and numpy; the only per-row Python left
is decompressing the (rare) compressed bodies and hashing the tags of small batches.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.errors import DecodeError
from rocketspark.message import sysflag
from rocketspark.message.hashing import java_string_hash, java_string_hash_array


def message_ids(uniq_keys: pa.Array, offset_msg_ids: Callable[[np.ndarray], pa.Array]) -> pa.Array:
    """Java's `MessageClientExt.getMsgId` per row: the producer's UNIQ_KEY, else the offset msgId.

    `offset_msg_ids(rows)` gives the offset msgIds of the rows at those indices; it is only asked
    for the rows without a UNIQ_KEY, which standard clients always set.
    """
    missing = uniq_keys.is_null().to_numpy(zero_copy_only=False)
    if not missing.any():
        return uniq_keys
    return pc.replace_with_mask(uniq_keys, pa.array(missing), offset_msg_ids(np.flatnonzero(missing)))


#: below this many rows, per-row Python beats the fixed cost of Arrow kernels
_SMALL_BATCH = 32


def tag_codes(tags: pa.Array) -> np.ndarray:
    """The consume-queue tag code of each row: Java's `String.hashCode` of the tags, 0 for none."""
    if tags.null_count == len(tags):
        return np.zeros(len(tags), dtype=np.int64)
    if len(tags) <= _SMALL_BATCH:  # Arrow kernels cost more than they save for a few rows
        return np.array([tag_code(tag) for tag in tags.to_pylist()], dtype=np.int64)
    return java_string_hash_array(tags)


@functools.lru_cache(maxsize=1024)  # a topic uses few distinct tags
def tag_code(tag: str | None) -> int:
    """The consume-queue tag code of one message's tags."""
    return java_string_hash(tag) if tag else 0


def decompress_bodies(bodies: pa.Array, sys_flags: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """(bodies with the compressed ones inflated, sys flags with their COMPRESSED bit cleared).

    4.x flags zlib with the COMPRESSED bit alone, 5.x adds the compression type bits; Java
    producers only ever use zlib by default. LZ4 and ZSTD raise DecodeError, as does corrupt data.
    """
    compressed = np.flatnonzero(sys_flags & sysflag.COMPRESSED)
    if len(compressed) == 0:
        return bodies, sys_flags
    kinds = sys_flags[compressed] & sysflag.COMPRESSION_TYPE_MASK
    unsupported = np.flatnonzero((kinds != 0) & (kinds != sysflag.COMPRESSION_ZLIB))
    if len(unsupported):
        row, kind = int(compressed[unsupported[0]]), int(kinds[unsupported[0]])
        name = sysflag.COMPRESSION_NAMES.get(kind, f"unknown type 0x{kind:x}")
        raise DecodeError(f"message {row} is compressed with {name}; only zlib bodies can be decompressed")
    try:
        plain = [zlib.decompress(body) for body in bodies.take(pa.array(compressed)).to_pylist()]
    except zlib.error as exc:
        raise DecodeError(f"a zlib-compressed body does not decompress: {exc}") from None
    mask = np.zeros(len(bodies), dtype=bool)
    mask[compressed] = True
    flags = sys_flags.copy()
    flags[compressed] &= ~sysflag.COMPRESSED
    return pc.replace_with_mask(bodies, pa.array(mask), pa.array(plain, pa.binary())), flags
