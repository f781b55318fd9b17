"""How full the store's file system is, and what the store does about it, as Apache RocketMQ does.

The file system holding the store is measured with `statvfs` every DISK_CHECK_INTERVAL_S (on a
worker thread). Past `diskMaxUsedSpaceRatio` percent used, retention deletes the oldest commit log
segments before their time (broker/store/retention.py). Past `diskSpaceWarningLevelRatio`
percent, or from the moment a write fails with ENOSPC until a later check finds the disk below
that level, sends are refused with SERVICE_NOT_AVAILABLE (14) and a remark saying the disk is
full; nothing is written then, so nothing acknowledged is lost, and pulls go on being served.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from pathlib import Path
from typing import Any

from broker.store.config import StoreConfig
from rocketspark.errors import RocketMQError
from rocketspark.protocol.codes import ResponseCode

log = logging.getLogger(__name__)

DISK_CHECK_INTERVAL_S = 2.0


def used_percent(path: Path) -> tuple[float, int]:
    """(percent of the file system holding `path` in use, its size in bytes), as `df` counts them
    (blocks reserved for root count as used)."""
    stats = os.statvfs(path)
    total = stats.f_blocks * stats.f_frsize
    available = stats.f_bavail * stats.f_frsize
    used = total - stats.f_bfree * stats.f_frsize
    in_use = used + available
    return (100.0 * used / in_use if in_use else 0.0), total


def disk_full_error(detail: str) -> RocketMQError:
    return RocketMQError(
        f"service not available now: the broker's disk is full ({detail}); sends are refused until space is freed",
        code=ResponseCode.SERVICE_NOT_AVAILABLE,
    )


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk is full (a write's ENOSPC or the store's refusal)."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(exc, RocketMQError) and exc.code == ResponseCode.SERVICE_NOT_AVAILABLE


class DiskSpace:
    """The store directory's file system: how full it is, and whether sends are refused."""

    def __init__(self, config: StoreConfig) -> None:
        self._path = config.store_path_root_dir
        self.max_used_ratio = config.disk_max_used_space_ratio
        self.warning_ratio = config.disk_space_warning_level_ratio
        self.used_percent = 0.0
        self.total_bytes = 0
        self._write_failed = False  # a write met ENOSPC since the last check
        self._failures = 0

    @property
    def full(self) -> bool:
        return self._write_failed or self.used_percent >= self.warning_ratio

    def bytes_over_max_used(self) -> int:
        """Bytes to free to get back under `diskMaxUsedSpaceRatio` (0 when under it)."""
        over = (self.used_percent - self.max_used_ratio) / 100 * self.total_bytes
        return max(0, int(over))

    def check_writable(self) -> None:
        """Refuse a send (SERVICE_NOT_AVAILABLE) while the disk is full (event loop)."""
        if not self.full:
            return
        if self._write_failed:
            raise disk_full_error("a write to the store failed with no space left on the device")
        raise disk_full_error(
            f"{self.used_percent:.0f}% of the store's file system is used, diskSpaceWarningLevelRatio="
            f"{self.warning_ratio}"
        )

    def put_future(self) -> asyncio.Future[Any]:
        """The future of a send's result, watched by :meth:`put_done`; SERVICE_NOT_AVAILABLE at once
        while the disk is full (event loop)."""
        self.check_writable()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.add_done_callback(self.put_done)
        return future

    def put_done(self, future: asyncio.Future[Any]) -> None:
        """A send's future is done: if it failed for want of space, refuse sends until a check
        finds space again."""
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None or not is_disk_full(exc):
            return
        self._failures += 1
        if not self._write_failed:
            log.error("the store's disk is full (%s): sends are refused until space is freed", exc)
            self._write_failed = True

    async def check(self) -> None:
        """Measure the file system again (statvfs on a worker thread)."""
        was_full = self.full
        failures = self._failures
        self.used_percent, self.total_bytes = await asyncio.to_thread(used_percent, self._path)
        if failures == self._failures:  # else a write failed while measuring: the next check tells
            self._write_failed = False
        if self.full and not was_full:
            log.error(
                "the store's file system is %.0f%% used (diskSpaceWarningLevelRatio=%d): sends are refused until "
                "space is freed",
                self.used_percent,
                self.warning_ratio,
            )
        elif was_full and not self.full:
            log.warning("the store's file system is %.0f%% used: sends are accepted again", self.used_percent)
