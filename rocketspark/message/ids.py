"""Message ids: the broker's offset msgId and the producer's UNIQ_KEY.

* offset msgId: uppercase hex of store IP (4 or 16 bytes), store port (int32) and commit log
  offset (int64); `VIEW_MESSAGE_BY_ID` decodes it back to the offset.
* UNIQ_KEY (Java's `MessageClientIDSetter`): uppercase hex of client IP (4 bytes), pid (low 16
  bits), a per-process random int, milliseconds since the start of the current month (32 bits) and a
  16-bit counter. Producers set it; consumers see it as the message's msgId. Unique per process.
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import os
import random
import socket
import struct
import threading
import time

import numpy as np
import pyarrow as pa

_TAIL = struct.Struct(">IH")  # time field (ms since the month began), counter


def hex_rows(rows: np.ndarray) -> pa.Array:
    """Uppercase hex of each row of a 2-D uint8 array, as a string array of equal-width values."""
    n, width = rows.shape
    chars = np.ascontiguousarray(rows).tobytes().hex().upper().encode()  # one C pass over all rows
    offsets = np.arange(0, n * width * 2 + 1, width * 2, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(chars)])


def socket_address_bytes(address: str) -> bytes:
    """`ip:port` as RocketMQ writes a socket address: IP bytes then a big-endian int32 port."""
    host, _, port = address.rpartition(":")
    ip = ipaddress.ip_address(host.strip("[]"))
    return ip.packed + struct.pack(">i", int(port))


@functools.lru_cache(maxsize=64)
def _host_hex(store_host: str) -> str:
    return socket_address_bytes(store_host).hex().upper()


def offset_msg_id(store_host: str, commit_log_offset: int) -> str:
    return _host_hex(store_host) + f"{commit_log_offset & 0xFFFFFFFFFFFFFFFF:016X}"


def offset_msg_ids(store_host: str, commit_log_offsets: np.ndarray) -> pa.Array:
    """Vectorized :func:`offset_msg_id` for many offsets of one store host."""
    prefix = np.frombuffer(socket_address_bytes(store_host), dtype=np.uint8)
    n = len(commit_log_offsets)
    rows = np.empty((n, len(prefix) + 8), dtype=np.uint8)
    rows[:, : len(prefix)] = prefix
    rows[:, len(prefix) :] = np.asarray(commit_log_offsets, dtype=">i8").view(np.uint8).reshape(n, 8)
    return hex_rows(rows)


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """(`ip:port` of the store host, commit log offset); raises ValueError if it is not one."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"{msg_id!r} is not a hex message id") from None
    if len(raw) == 16:
        ip_length = 4
    elif len(raw) == 28:
        ip_length = 16
    else:
        raise ValueError(f"{msg_id!r} is not an offset message id (32 or 56 hex digits)")
    ip = ipaddress.ip_address(raw[:ip_length])
    (port,) = struct.unpack_from(">i", raw, ip_length)
    (offset,) = struct.unpack_from(">q", raw, ip_length + 4)
    host = f"[{ip}]" if ip.version == 6 else str(ip)
    return f"{host}:{port}", offset


def local_ip() -> str:
    """The address other machines would see this host by (loopback when offline)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))  # no packet is sent for a UDP connect
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def _month_start_ms(now_ms: int) -> tuple[int, int]:
    """(start of this month, start of next month) in epoch milliseconds, local time as in Java."""
    now = dt.datetime.fromtimestamp(now_ms / 1000)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (start + dt.timedelta(days=32)).replace(day=1)
    return int(start.timestamp() * 1000), int(following.timestamp() * 1000)


class UniqueIdGenerator:
    """Thread-safe UNIQ_KEY source for one process: no two ids it returns are equal.

    The tail of an id is (time field, counter). Java's `MessageClientIDSetter` takes the time field
    from the clock and lets the counter wrap, relying on the clock to move on before 65,536 ids share
    one time value. A vectorised `next_many` can ask for millions of ids within one millisecond, so
    here the time field never goes back and advances by one whenever 65,536 ids have used its current
    value; under a burst it runs a little ahead of the clock (about 15 ms per million ids).
    """

    def __init__(self, ip: str | None = None) -> None:
        packed = ipaddress.ip_address(ip or local_ip()).packed[-4:]
        fixed = packed + struct.pack(">h", os.getpid() & 0x7FFF) + struct.pack(">i", random.getrandbits(31))
        self._prefix = np.frombuffer(fixed, dtype=np.uint8)
        self._prefix_hex = fixed.hex().upper()
        self._lock = threading.Lock()
        self._counter = 0  # the next counter value; wraps at 65,536 as Java's does
        self._time = 0  # the current time field: ms since the month began, or ahead of the clock
        self._used = 0  # ids issued with the current time field (at most 65,536)
        self._month_start, self._next_month = _month_start_ms(int(time.time() * 1000))

    def _reserve(self, count: int) -> tuple[int, int, int]:
        """(time field, ids already issued with it, counter) for the first of `count` new ids."""
        with self._lock:
            now = int(time.time() * 1000)
            if now >= self._next_month:
                self._month_start, self._next_month = _month_start_ms(now)
                self._time = self._used = 0
            elapsed = now - self._month_start
            if elapsed > self._time:
                self._time, self._used = elapsed, 0
            first = (self._time, self._used, self._counter)
            issued = self._used + count
            self._time += issued >> 16
            self._used = issued & 0xFFFF
            self._counter = (self._counter + count) & 0xFFFF
            return first

    def next(self) -> str:
        elapsed, _, counter = self._reserve(1)
        return self._prefix_hex + _TAIL.pack(elapsed & 0xFFFFFFFF, counter).hex().upper()

    def next_many(self, count: int) -> pa.Array:
        """`count` new ids as a string array (one reservation, vectorized formatting)."""
        elapsed, used, counter = self._reserve(count)
        steps = np.arange(count, dtype=np.int64)
        times = ((elapsed + ((used + steps) >> 16)) & 0xFFFFFFFF).astype(">u4")
        counters = ((counter + steps) & 0xFFFF).astype(">u2")
        width = len(self._prefix)
        rows = np.empty((count, width + 6), dtype=np.uint8)
        rows[:, :width] = self._prefix
        rows[:, width : width + 4] = times.view(np.uint8).reshape(count, 4)
        rows[:, width + 4 :] = counters.view(np.uint8).reshape(count, 2)
        return hex_rows(rows)
