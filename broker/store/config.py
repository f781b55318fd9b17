"""Settings of the message store; their camelCase names are Apache RocketMQ's broker.conf keys."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from rocketspark.errors import ConfigError
from rocketspark.settings import require_positive


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"  # acknowledged once handed to the OS, fsynced periodically
    SYNC_FLUSH = "SYNC_FLUSH"  # acknowledged after fsync; concurrent senders share one fsync


_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def default_store_dir() -> Path:
    return Path.home() / "rocketspark" / "store"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    store_path_root_dir: Path = field(default_factory=default_store_dir)
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    # a commit log segment is closed once it reaches this size (RocketMQ: 1 GiB)
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    # consume queue file size as RocketMQ counts it (20 bytes an entry): 300,000 entries a file
    mapped_file_size_consume_queue: int = 300_000 * 20
    max_message_size: int = 4 * 1024 * 1024
    flush_interval_commit_log: int = 500  # ms, ASYNC_FLUSH
    flush_interval_consume_queue: int = 1000  # ms
    sync_flush_timeout: int = 5000  # ms before SYNC_FLUSH answers FLUSH_DISK_TIMEOUT
    file_reserved_time: float = 72.0  # hours a segment is kept after its last write
    delete_when: str = "04"  # hours of the day when expired segments are deleted ("*" for any hour)
    clean_resource_interval: int = 10_000  # ms between retention checks
    # largest stored batch a group commit builds, in body bytes and in messages
    max_group_commit_bytes: int = 8 * 1024 * 1024
    max_group_commit_messages: int = 65_536
    # recently written batches kept in memory so tailing consumers never read the disk
    batch_cache_bytes: int = 32 * 1024 * 1024
    # hash slots of an index file, at most (RocketMQ's maxHashSlotNum); fewer for small segments
    max_hash_slot_num: int = 5_000_000
    # blocks of consume queue entries read back from disk, kept for consumers reading behind
    consume_queue_cache_bytes: int = 8 * 1024 * 1024
    # back-pressure: sends waiting for the commit log writer are answered SYSTEM_BUSY when they
    # waited this long (ms), or at once when this many sends or body bytes are waiting already
    wait_time_mills_in_send_queue: int = 200
    send_thread_pool_queue_capacity: int = 10_000
    send_queue_max_bytes: int = 128 * 1024 * 1024
    # duplicate detection: a send to a user topic whose UNIQ_KEY was stored within this many
    # seconds is not stored again (0 turns it off); at least this many newest keys are remembered
    duplicate_window_seconds: int = 600
    duplicate_window_max_keys: int = 1_000_000
    # percent of the store's file system in use past which retention deletes the oldest segments
    # early, and past which sends are refused (SERVICE_NOT_AVAILABLE) until space is freed
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90
    # delays of the levels 1, 2, ... of delayed and retried messages (the DELAY property); units s, m, h, d
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    # timer messages (TIMER_DELIVER_MS, ...): how far ahead one may be due (s), and after how long (s; Apache
    # counts slots of timerPrecisionMs, 1 s) a parked one is written again, at most half of fileReservedTime
    timer_max_delay_sec: int = 3 * 24 * 3600
    timer_roll_window_slot: int = 2 * 24 * 3600

    def __post_init__(self) -> None:
        require_positive(
            self,
            "mapped_file_size_commit_log",
            "mapped_file_size_consume_queue",
            "max_message_size",
            "flush_interval_commit_log",
            "flush_interval_consume_queue",
            "sync_flush_timeout",
            "file_reserved_time",
            "clean_resource_interval",
            "max_group_commit_bytes",
            "max_group_commit_messages",
            "consume_queue_cache_bytes",
            "max_hash_slot_num",
            "wait_time_mills_in_send_queue",
            "send_thread_pool_queue_capacity",
            "send_queue_max_bytes",
            "duplicate_window_max_keys",
            "timer_max_delay_sec",
            "timer_roll_window_slot",
        )
        for name in ("disk_max_used_space_ratio", "disk_space_warning_level_ratio"):
            if not 0 < getattr(self, name) <= 100:
                raise ConfigError(f"{name} is a percentage of the disk, 1..100, got {getattr(self, name)}")
        if self.duplicate_window_seconds < 0:
            window = self.duplicate_window_seconds
            raise ConfigError(f"duplicateWindowSeconds must be 0 (off) or positive, got {window}")
        self.delete_hours()  # validates
        self.delay_levels_ms()  # validates

    def delete_hours(self) -> frozenset[int] | None:
        """Hours of the day at which expired segments are deleted; None means any hour."""
        if self.delete_when.strip() == "*":
            return None
        hours = set()
        for part in self.delete_when.split(";"):
            if not part.strip().isdigit() or not 0 <= int(part) <= 23:
                raise ConfigError(f"deleteWhen must be hours 00..23 separated by ';' or '*', got {self.delete_when!r}")
            hours.add(int(part))
        return frozenset(hours)

    def delay_levels_ms(self) -> tuple[int, ...]:
        """The delay of each level in ms: element 0 is level 1."""
        delays = []
        for part in self.message_delay_level.split():
            number, unit = part[:-1], part[-1:]
            if unit not in _DELAY_UNITS_MS or not number.isdigit() or int(number) == 0:
                raise ConfigError(
                    f"messageDelayLevel must be positive durations such as 1s 5m 2h 1d, separated by spaces; got "
                    f"{part!r}"
                )
            delays.append(int(number) * _DELAY_UNITS_MS[unit])
        if not delays:
            raise ConfigError("messageDelayLevel must name at least one delay")
        return tuple(delays)

    @property
    def timer_roll_after_ms(self) -> int:
        """How long a timer message waits parked before it is written again (so retention, which
        deletes a segment fileReservedTime after its last write, never deletes it before it is due)."""
        return int(min(self.timer_roll_window_slot * 1000, self.file_reserved_time * 3_600_000 / 2))

    @property
    def consume_queue_entries_per_file(self) -> int:
        return max(1, self.mapped_file_size_consume_queue // 20)

    @property
    def index_slots_per_file(self) -> int:
        """Hash slots of a new index file: one per 512 bytes of its segment (2M for 1 GiB: chains of
        about four entries with 128-byte bodies and one key, an 8 MiB table in memory while the
        file fills)."""
        return min(self.max_hash_slot_num, max(1024, self.mapped_file_size_commit_log // 512))

    @property
    def commit_log_dir(self) -> Path:
        return self.store_path_root_dir / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        return self.store_path_root_dir / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.store_path_root_dir / "index"

    @property
    def checkpoint_path(self) -> Path:
        return self.store_path_root_dir / "checkpoint"

    @property
    def duplicate_window_path(self) -> Path:
        """The duplicate window's snapshot (broker/store/duplicates/window_snapshot.py)."""
        return self.store_path_root_dir / "duplicateWindow"

    @property
    def abort_path(self) -> Path:
        return self.store_path_root_dir / "abort"
