"""Client settings, with Apache RocketMQ's `ClientConfig` timers as defaults (all in milliseconds)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from rocketspark.errors import ConfigError
from rocketspark.message.ids import local_ip
from rocketspark.remoting.client import split_address
from rocketspark.remoting.signing import SessionCredentials
from rocketspark.remoting.tls import TrustSetting, require_tls_for_trust
from rocketspark.settings import require_positive

NAMESRV_ADDR_ENV = "NAMESRV_ADDR"
#: where the CLI, the jobs, the demo and the notebooks take credentials from (the library itself never
#: reads them: pass `credentials=`)
ACCESS_KEY_ENV = "ROCKETMQ_ACCESS_KEY"
SECRET_KEY_ENV = "ROCKETMQ_SECRET_KEY"
SECURITY_TOKEN_ENV = "ROCKETMQ_SECURITY_TOKEN"


def parse_namesrv_addr(text: str | None) -> tuple[str, ...]:
    """`host:port;host:port` (commas accepted too) -> addresses; a ConfigError names a bad one."""
    addresses = tuple(a.strip() for a in (text or "").replace(",", ";").split(";") if a.strip())
    for address in addresses:
        try:
            split_address(address)
        except ValueError:
            raise ConfigError(f"name server address {address!r} is not host:port") from None
    return addresses


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Where the name servers are and how often the client talks to them and to brokers.

    `namesrv_addr` defaults to the NAMESRV_ADDR environment variable, as in RocketMQ. With
    `credentials`, every request of the client is signed (ACL 1.0, as Java's `AclClientRPCHook`).
    With `use_tls`, every connection (name servers and brokers) is TLS, the servers' certificates
    verified against `tls_trust` (:func:`rocketspark.remoting.tls.client_context`).
    """

    namesrv_addr: str | None = None
    client_ip: str = field(default_factory=local_ip)
    instance_name: str = "DEFAULT"
    poll_name_server_interval_ms: int = 30_000
    heartbeat_broker_interval_ms: int = 30_000
    persist_consumer_offset_interval_ms: int = 5_000
    request_timeout_ms: int = 3_000
    connect_timeout_ms: int = 3_000
    idle_timeout_s: float = 120.0
    credentials: SessionCredentials | None = None
    use_tls: bool = False
    tls_trust: TrustSetting = None

    def namesrv_addresses(self) -> tuple[str, ...]:
        addresses = parse_namesrv_addr(self.namesrv_addr or os.environ.get(NAMESRV_ADDR_ENV))
        if not addresses:
            raise ConfigError(f"no name server address: pass namesrv_addr='host:port' or set {NAMESRV_ADDR_ENV}")
        return addresses

    def __post_init__(self) -> None:
        require_positive(
            self,
            "poll_name_server_interval_ms",
            "heartbeat_broker_interval_ms",
            "persist_consumer_offset_interval_ms",
            "request_timeout_ms",
            "connect_timeout_ms",
        )
        require_tls_for_trust(self.use_tls, self.tls_trust)


def client_config_for(
    client_config: ClientConfig | None,
    namesrv_addr: str | None,
    credentials: SessionCredentials | None,
    use_tls: bool = False,
    tls_trust: TrustSetting = None,
) -> ClientConfig:
    """The config a producer or consumer runs with: `client_config`, or one for `namesrv_addr`,
    signing with `credentials` when given, over TLS with `use_tls`."""
    config = client_config or ClientConfig(namesrv_addr=namesrv_addr)
    if credentials is not None:
        config = dataclasses.replace(config, credentials=credentials)
    if use_tls or tls_trust is not None:
        config = dataclasses.replace(config, use_tls=use_tls, tls_trust=tls_trust)
    return config


def credentials_from_env(access_key: str | None = None) -> SessionCredentials | None:
    """Credentials of `access_key` (default: ROCKETMQ_ACCESS_KEY) with ROCKETMQ_SECRET_KEY and the
    optional ROCKETMQ_SECURITY_TOKEN; None without an access key. An access key without its secret,
    or a secret without an access key, is a ConfigError naming the variable (never a value)."""
    key = (access_key or os.environ.get(ACCESS_KEY_ENV) or "").strip()
    if not key:
        if os.environ.get(SECRET_KEY_ENV):
            raise ConfigError(f"{SECRET_KEY_ENV} is set without an access key: set {ACCESS_KEY_ENV} (or --access-key)")
        return None
    secret = os.environ.get(SECRET_KEY_ENV)
    if not secret:
        raise ConfigError(f"access key {key} needs its secret key: set {SECRET_KEY_ENV}")
    return SessionCredentials(key, secret, os.environ.get(SECURITY_TOKEN_ENV) or None)
