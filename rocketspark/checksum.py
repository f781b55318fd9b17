"""RocketMQ's `UtilAll.crc32`: CRC-32 masked to a non-negative Java int.

Used for message body checksums (BODYCRC) and the body checksum of broker registrations.
"""

from __future__ import annotations

import zlib


def crc32(data: bytes | memoryview) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF
