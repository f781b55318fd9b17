"""Stable 64-bit hashes of the values of Arrow string and binary arrays, vectorised with numpy.

Each byte string is hashed with a multilinear hash (the sum of its bytes times per-position 64-bit
keys, modulo 2^64, then splitmix64's finaliser), twice with independent keys. Stable across
processes and runs (unlike Python's `hash`), so the sink's deterministic message ids and the
broker's duplicate window both use it.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

U64 = np.uint64
MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
NULL_HASH = U64(0x6A09E667F3BCC909)  # the hash of an absent value (distinct from "")
KEY_SEEDS = (0x243F6A8885A308D3, 0x13198A2E03707344)

_keys_lock = threading.Lock()
_keys: list[np.ndarray] = [np.empty(0, dtype=U64), np.empty(0, dtype=U64)]


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise (a bijection of uint64)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> U64(30))
        x = x * U64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> U64(27))
        x = x * U64(0x94D049BB133111EB)
        result: np.ndarray = x ^ (x >> U64(31))
        return result


def mix64_int(value: int) -> int:
    return int(mix64(np.array([value & MASK64], dtype=U64))[0])


def _position_keys(which: int, length: int) -> np.ndarray:
    """The per-position keys of hash `which`, at least `length` of them (grown on demand, kept)."""
    with _keys_lock:
        keys = _keys[which]
        if len(keys) < length:
            size = max(length, 2 * len(keys), 1024)
            with np.errstate(over="ignore"):
                positions = np.arange(size, dtype=U64) * U64(GOLDEN) + U64(KEY_SEEDS[which])
            keys = mix64(positions) | U64(1)
            _keys[which] = keys
        return keys


def binary_hashes(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Two independent 64-bit hashes of each value of a string or binary array (nulls hash to a
    constant of their own)."""
    n = len(array)
    if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.binary())
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[array.offset : array.offset + n + 1].astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(buffers[2], dtype=np.uint8)[start:end] if buffers[2] is not None and end > start else None
    lengths = np.diff(offsets)
    positions = np.arange(end - start, dtype=np.int64) - np.repeat(offsets[:-1] - start, lengths)
    results = []
    for which in (0, 1):
        if data is None:
            sums = np.zeros(n, dtype=U64)
        else:
            keys = _position_keys(which, int(lengths.max()))
            with np.errstate(over="ignore"):
                terms = data.astype(U64) * keys[positions]
            totals = np.zeros(len(terms) + 1, dtype=U64)
            np.cumsum(terms, out=totals[1:])
            with np.errstate(over="ignore"):
                sums = totals[offsets[1:] - start] - totals[offsets[:-1] - start]
        with np.errstate(over="ignore"):
            hashed = mix64(sums + lengths.astype(U64) * U64(KEY_SEEDS[1 - which]) + U64(GOLDEN))
        if array.null_count:
            hashed[np.asarray(array.is_null().to_numpy(zero_copy_only=False))] = NULL_HASH
        results.append(hashed)
    return results[0], results[1]
