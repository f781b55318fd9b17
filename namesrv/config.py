"""Name server settings. Every timer is configurable so tests can shorten it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rocketspark.remoting.codec import DEFAULT_MAX_FRAME_LENGTH, check_frame_max_length
from rocketspark.remoting.connection import DEFAULT_IDLE_TIMEOUT_S
from rocketspark.settings import require_positive

DEFAULT_PORT = 9876


def default_data_dir() -> Path:
    return Path.home() / "rocketspark" / "namesrv"


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    data_dir: Path = field(default_factory=default_data_dir)
    scan_not_active_broker_interval_ms: int = 10_000
    broker_channel_expired_ms: int = 120_000
    server_channel_max_idle_s: float = DEFAULT_IDLE_TIMEOUT_S
    frame_max_length: int = DEFAULT_MAX_FRAME_LENGTH  # bytes; a longer frame closes its connection

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be within 0..65535, got {self.port}")
        require_positive(self, "scan_not_active_broker_interval_ms", "broker_channel_expired_ms")
        check_frame_max_length(self.frame_max_length, "--frame-max-length")

    @property
    def kv_config_path(self) -> Path:
        return self.data_dir / "kvConfig.json"
