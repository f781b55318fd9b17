"""Name server settings. Every timer is configurable so tests can shorten it.

TLS takes Apache RocketMQ's property names (`tls.server.mode`, `tls.server.certPath`,
`tls.server.keyPath`) as the name server's flags; see :mod:`rocketspark.remoting.tls`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from namesrv.write_guard import Network
from rocketspark.errors import ConfigError
from rocketspark.protocol.codec import DEFAULT_MAX_FRAME_LENGTH, check_frame_max_length
from rocketspark.remoting.connection import DEFAULT_IDLE_TIMEOUT_S
from rocketspark.remoting.tls import ServerTls, server_tls
from rocketspark.settings import require_positive

DEFAULT_PORT = 9876


def default_data_dir() -> Path:
    return Path.home() / "rocketspark" / "namesrv"


@dataclass(frozen=True, slots=True)
class NamesrvConfig:
    host: str = "127.0.0.1"  # the address listened on (--listen)
    port: int = DEFAULT_PORT
    data_dir: Path = field(default_factory=default_data_dir)
    scan_not_active_broker_interval_ms: int = 10_000
    broker_channel_expired_ms: int = 120_000
    server_channel_max_idle_s: float = DEFAULT_IDLE_TIMEOUT_S
    frame_max_length: int = DEFAULT_MAX_FRAME_LENGTH  # bytes; a longer frame closes its connection
    tls_server_mode: str | None = None  # disabled, permissive, enforcing; None: permissive with a certificate
    tls_server_cert_path: Path | None = None
    tls_server_key_path: Path | None = None
    # addresses and networks that may send write requests (namesrv/write_guard.py); None: anyone
    write_allow_list: tuple[Network, ...] | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be within 0..65535, got {self.port}")
        require_positive(self, "scan_not_active_broker_interval_ms", "broker_channel_expired_ms")
        check_frame_max_length(self.frame_max_length, "--frame-max-length")
        self.server_tls().check_frame_length(self.frame_max_length)

    def server_tls(self) -> ServerTls:
        """The TLS the server runs with (reads the certificate and key: a bad file is a ConfigError)."""
        return server_tls(self.tls_server_mode, self.tls_server_cert_path, self.tls_server_key_path)

    @property
    def kv_config_path(self) -> Path:
        return self.data_dir / "kvConfig.json"
