"""Broker settings. Keys are Apache RocketMQ's broker.conf names; every timer is configurable.

Store settings live in :class:`broker.store.config.StoreConfig`; one broker.conf sets both.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from broker.flavor import Flavor
from rocketspark.errors import ConfigError
from rocketspark.protocol.codec import DEFAULT_MAX_FRAME_LENGTH, check_frame_max_length
from rocketspark.protocol.schema import wire
from rocketspark.remoting.connection import DEFAULT_IDLE_TIMEOUT_S
from rocketspark.remoting.tls import ServerTls, TlsMode, server_tls
from rocketspark.settings import require_positive

DEFAULT_PORT = 10911


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    # rocketspark, or apache: answer as Apache RocketMQ 4.9 does (broker/flavor.py)
    flavor: Flavor = Flavor.rocketspark
    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    namesrv_addr: str | None = None  # "host:port;host:port"; NAMESRV_ADDR when unset
    broker_ip1: str = field(default="127.0.0.1", metadata=wire("brokerIP1"))  # the address published
    bind_address: str | None = None  # the address listened on (Apache 5's name); None: brokerIP1
    listen_port: int = DEFAULT_PORT
    # the RocketMQ 5.x gRPC endpoint (broker/grpc/, Apache's proxy key); 0: off
    grpc_server_port: int = 0
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8  # queues of TBW102, the template of auto-created topics
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    # name server registration
    register_name_server_period: int = 30_000
    register_broker_timeout_mills: int = 6_000
    # long polling
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1_000
    # transfer limits of one standard pull (Java's defaults are 32 messages / 256 KiB; larger pulls
    # serve lite-pull consumers better and every client accepts fewer messages than it asked for)
    max_transfer_count_on_message_in_memory: int = 1024
    max_transfer_bytes_on_message_in_memory: int = 4 * 1024 * 1024
    # the Arrow send and pull extension (docs/protocol.md); off makes clients fall back
    arrow_enable: bool = True
    arrow_pull_max_messages: int = 100_000
    arrow_pull_max_bytes: int = 12 * 1024 * 1024
    # clients
    flush_consumer_offset_interval: int = 5_000
    channel_expired_timeout: int = 120_000
    client_channel_scan_interval: int = 10_000
    rebalance_lock_max_live_time: int = 60_000
    server_channel_max_idle_time_seconds: float = DEFAULT_IDLE_TIMEOUT_S
    # largest frame in bytes, either way (Java's -Dcom.rocketmq.remoting.frameMaxLength); a longer
    # request closes its connection, and pull answers are cut to fit
    frame_max_length: int = DEFAULT_MAX_FRAME_LENGTH
    # back-pressure: a connection with this many requests being handled is not read until one ends;
    # a pull that would be held beyond this many held pulls is answered SYSTEM_BUSY
    max_in_flight_requests_per_connection: int = 4096
    max_held_pull_requests: int = 20_000
    # TLS on the listening port, Apache RocketMQ's property names (rocketspark.remoting.tls):
    # disabled, permissive or enforcing; None: with a certificate enforcing under ACL, else permissive; else disabled
    tls_server_mode: str | None = field(default=None, metadata=wire("tls.server.mode"))
    tls_server_cert_path: Path | None = field(default=None, metadata=wire("tls.server.certPath"))
    tls_server_key_path: Path | None = field(default=None, metadata=wire("tls.server.keyPath"))
    # the broker's own connections to the name servers: TLS with tls.enable, verified against the
    # system's CAs or the PEM CA file tls.client.trustCertPath
    tls_enable: bool = field(default=False, metadata=wire("tls.enable"))
    tls_client_trust_cert_path: Path | None = field(default=None, metadata=wire("tls.client.trustCertPath"))
    # access control (docs/security.md), off by default: accounts from plainAclFile (our key), else
    # from $ROCKETMQ_HOME/conf/plain_acl.yml as Apache RocketMQ reads them
    acl_enable: bool = False
    plain_acl_file: str | None = None
    # transactions (broker/transaction/): a half message stored this long ago (ms) is checked, every
    # transactionCheckInterval ms, at most transactionCheckMax times, then moved to TRANS_CHECK_MAX_TIME_TOPIC
    transaction_time_out: int = 6_000
    transaction_check_interval: int = 60_000
    transaction_check_max: int = 15
    # 5.x pop consumption (broker/pop/), Apache's proxy keys: the invisible durations a receive may ask
    # (Apache's least is 10 s; short ones keep local tests and demos quick), the longest long poll,
    # and how push consumers' messages are renewed while their client lives, and released once it left
    min_invisible_time_mills_for_recv: int = 1_000
    max_invisible_time_mills: int = 12 * 3_600_000
    grpc_client_consumer_max_long_polling_timeout_millis: int = 20_000
    renew_slice_time_millis: int = 60_000
    renew_ahead_time_millis: int = 10_000
    renew_max_time_millis: int = 3 * 3_600_000
    invisible_time_millis_when_clear: int = 1_000

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort must be within 0..65535, got {self.listen_port}")
        if not 0 <= self.grpc_server_port <= 65535:
            raise ConfigError(f"grpcServerPort must be within 1..65535, or 0 (off), got {self.grpc_server_port}")
        if self.broker_role is BrokerRole.SLAVE or self.broker_id != 0:
            raise ConfigError("this broker runs as a master only (brokerId=0, brokerRole ASYNC_MASTER or SYNC_MASTER)")
        if not self.broker_name or not self.broker_cluster_name:
            raise ConfigError("brokerName and brokerClusterName must not be empty")
        require_positive(
            self,
            "register_name_server_period",
            "register_broker_timeout_mills",
            "short_polling_time_mills",
            "max_transfer_count_on_message_in_memory",
            "max_transfer_bytes_on_message_in_memory",
            "arrow_pull_max_messages",
            "arrow_pull_max_bytes",
            "flush_consumer_offset_interval",
            "channel_expired_timeout",
            "client_channel_scan_interval",
            "rebalance_lock_max_live_time",
            "default_topic_queue_nums",
            "max_in_flight_requests_per_connection",
            "max_held_pull_requests",
            "transaction_time_out",
            "transaction_check_interval",
            "transaction_check_max",
            "min_invisible_time_mills_for_recv",
            "max_invisible_time_mills",
            "grpc_client_consumer_max_long_polling_timeout_millis",
            "renew_slice_time_millis",
            "renew_max_time_millis",
            "invisible_time_millis_when_clear",
        )
        if not 0 < self.renew_ahead_time_millis < self.renew_slice_time_millis:
            raise ConfigError(
                f"renewAheadTimeMillis must be positive and less than renewSliceTimeMillis "
                f"({self.renew_slice_time_millis}), got {self.renew_ahead_time_millis}"
            )
        check_frame_max_length(self.frame_max_length, "frameMaxLength")
        self.server_tls().check_frame_length(self.frame_max_length)

    @property
    def listen_host(self) -> str:
        return self.bind_address or self.broker_ip1

    def server_tls(self) -> ServerTls:
        """The TLS the broker serves with (reads the certificate and key: a bad file is a ConfigError).
        With ACL on and a certificate, no mode means `enforcing`: ACL belongs with TLS only."""
        with_cert = TlsMode.ENFORCING if self.acl_enable else TlsMode.PERMISSIVE
        return server_tls(
            self.tls_server_mode, self.tls_server_cert_path, self.tls_server_key_path, mode_with_cert=with_cert
        )

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    def namesrv_list(self) -> list[str]:
        return [a.strip() for a in (self.namesrv_addr or "").split(";") if a.strip()]
