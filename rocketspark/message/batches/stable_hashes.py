"""Stable 64-bit hashes of the values of Arrow string and binary arrays, vectorised with numpy.

Each byte string is hashed with a multilinear hash: zero-padded to whole 8-byte little-endian
words, the sum of its words times per-position 64-bit keys, plus its length times a seed, modulo
2^64, then splitmix64's finaliser; twice with independent keys. Working on words rather than bytes
makes it about eight times less arithmetic, and when all values have one length (message ids,
UNIQ_KEYs) the data is used as a matrix of words in place. Stable across
processes and runs (unlike Python's `hash`), so the sink's deterministic message ids and the
broker's duplicate window both use it.
"""

from __future__ import annotations

import operator
import struct
import threading
from collections.abc import Callable
from functools import lru_cache

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
    """:func:`mix64` of one value, in Python integers."""
    x = value & MASK64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


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
    layout = _Layout(array)
    return layout.hash(0), layout.hash(1)


def binary_hash(array: pa.Array) -> np.ndarray:
    """The first of :func:`binary_hashes`, for callers that need one 64-bit hash."""
    return _Layout(array).hash(0)


def bytes_hash(value: bytes) -> int:
    """:func:`binary_hash` of one value, in Python integers: for the few keys of a small round,
    where numpy's fixed cost per call outweighs the arithmetic."""
    words = (len(value) + 7) // 8
    unpack, keys = _word_layout(words)
    total = sum(map(operator.mul, unpack(value.ljust(words * 8, b"\0")), keys))
    return mix64_int(total + len(value) * KEY_SEEDS[1] + GOLDEN)


@lru_cache(maxsize=64)
def _word_layout(words: int) -> tuple[Callable[[bytes], tuple[int, ...]], list[int]]:
    """How to read `words` little-endian words, and the first `words` keys of hash 0 as Python
    integers (keys of a given length are asked again and again: unique keys all have the same
    few lengths)."""
    keys: list[int] = _position_keys(0, words)[:words].tolist()
    return struct.Struct(f"<{words}Q").unpack, keys


def binary_hash_and_lengths(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """:func:`binary_hash`, and the length in bytes of each value."""
    layout = _Layout(array)
    return layout.hash(0), layout.lengths


class _Layout:
    """Each value of a string or binary array as zero-padded 64-bit words, ready to hash."""

    def __init__(self, array: pa.Array) -> None:
        if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
            array = array.cast(pa.binary())
        self.array = array
        n = len(array)
        buffers = array.buffers()
        offsets = np.frombuffer(buffers[1], dtype=np.int32)[array.offset : array.offset + n + 1].astype(np.int64)
        start, end = int(offsets[0]), int(offsets[-1])
        data = np.frombuffer(buffers[2], dtype=np.uint8)[start:end] if buffers[2] is not None else np.empty(0, np.uint8)
        self.lengths = np.diff(offsets)
        word_counts = (self.lengths + 7) // 8
        self.width = int(word_counts.max()) if n else 0
        self.matrix: np.ndarray | None = None  # n x width words, when every value has one length
        if n and int(self.lengths.min()) == int(self.lengths.max()):
            length = int(self.lengths[0])
            rows = np.zeros((n, self.width * 8), dtype=np.uint8)
            rows[:, :length] = data.reshape(n, length)
            self.matrix = rows.view("<u8")
            return
        word_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(word_counts, out=word_offsets[1:])
        padded = np.zeros(int(word_offsets[-1]) * 8, dtype=np.uint8)
        byte_positions = np.arange(end - start, dtype=np.int64) - np.repeat(offsets[:-1] - start, self.lengths)
        padded[byte_positions + np.repeat(word_offsets[:-1] * 8, self.lengths)] = data
        self.words = padded.view("<u8")
        self.word_offsets = word_offsets
        self.word_positions = np.arange(len(self.words), dtype=np.int64) - np.repeat(word_offsets[:-1], word_counts)

    def hash(self, which: int) -> np.ndarray:
        keys = _position_keys(which, self.width)
        with np.errstate(over="ignore"):
            if self.matrix is not None:
                sums = self.matrix @ keys[: self.width]  # wraps as the sum of products (355 -> 94 µs at 10,000 x 4)
            else:
                totals = np.zeros(len(self.words) + 1, dtype=U64)
                np.cumsum(self.words * keys[self.word_positions], out=totals[1:])
                sums = totals[self.word_offsets[1:]] - totals[self.word_offsets[:-1]]
            hashed = mix64(sums + self.lengths.astype(U64) * U64(KEY_SEEDS[1 - which]) + U64(GOLDEN))
        if self.array.null_count:
            hashed[np.asarray(self.array.is_null().to_numpy(zero_copy_only=False))] = NULL_HASH
        return hashed
