"""Registration with every name server: at start, every registerNameServerPeriod, and at once
when topics change; unregistration on clean shutdown.

The first registration runs before the broker reports its boot: a name server that closes the
broker's plain connection unanswered (one that enforces TLS) while `tls.enable` is off stops the
start with a ConfigError naming the setting, instead of a broker that serves but is never found."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from broker.config import BrokerConfig
from rocketspark.checksum import crc32
from rocketspark.errors import ConfigError, RocketMQError, TlsRequiredError
from rocketspark.protocol.body.register import RegisterBrokerBody
from rocketspark.protocol.body.topic import TopicConfigSerializeWrapper
from rocketspark.protocol.codes import RequestCode, ResponseCode, code_name
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.namesrv import RegisterBrokerRequestHeader, UnregisterBrokerRequestHeader
from rocketspark.remoting.client import RemotingClient
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)


class NamesrvRegistration:
    def __init__(
        self,
        config: BrokerConfig,
        broker_addr: str,
        client: RemotingClient,
        topic_configs: Callable[[], TopicConfigSerializeWrapper],
    ) -> None:
        self.config = config
        self.broker_addr = broker_addr
        self.client = client
        self.topic_configs = topic_configs
        self.namesrv_addrs = config.namesrv_list() or [
            a.strip() for a in os.environ.get("NAMESRV_ADDR", "").split(";") if a.strip()
        ]
        self._failing: set[str] = set()
        self._needs_tls: set[str] = set()  # name servers that closed a plain connection unanswered
        self._service = PeriodicService("register-broker", config.register_name_server_period / 1000, self.register_all)

    async def start(self) -> None:
        """Register once, then every period; ConfigError when a name server needs TLS and `tls.enable` is off."""
        if not self.namesrv_addrs:
            log.warning(
                "no name server configured (--namesrv, namesrvAddr or NAMESRV_ADDR): clients cannot find this broker"
            )
            return
        await self.register_all()
        if self._needs_tls and not self.config.tls_enable:
            names = ", ".join(sorted(self._needs_tls))
            raise ConfigError(
                f"name server {names} closed the broker's plain connection unanswered: it enforces TLS; "
                "set tls.enable=true in broker.conf (and tls.client.trustCertPath to its CA)"
            )
        self._service.start()

    def trigger(self) -> None:
        """Register again now (topics changed)."""
        if self._service.running:
            self._service.trigger()

    async def register_all(self) -> None:
        body = RegisterBrokerBody(self.topic_configs()).encode()
        header = RegisterBrokerRequestHeader(
            broker_name=self.config.broker_name,
            broker_addr=self.broker_addr,
            cluster_name=self.config.broker_cluster_name,
            ha_server_addr=self.broker_addr,
            broker_id=self.config.broker_id,
            body_crc32=crc32(body),
        )
        await asyncio.gather(*(self._register(addr, header, body) for addr in self.namesrv_addrs))

    async def _register(self, namesrv: str, header: RegisterBrokerRequestHeader, body: bytes) -> None:
        request = RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body)
        timeout = self.config.register_broker_timeout_mills / 1000
        try:
            response = await self.client.invoke(namesrv, request, timeout)
            if response.code != ResponseCode.SUCCESS:
                raise RocketMQError(f"{code_name(response.code, ResponseCode)}: {response.remark}")
        except RocketMQError as exc:
            if isinstance(exc, TlsRequiredError):
                self._needs_tls.add(namesrv)
            if namesrv not in self._failing:
                log.warning("registration with name server %s failed: %s", namesrv, exc)
                self._failing.add(namesrv)
            return
        if namesrv in self._failing:
            log.info("registered with name server %s again", namesrv)
            self._failing.discard(namesrv)

    async def stop(self) -> None:
        """Stop re-registering and unregister from every name server."""
        await self._service.stop()
        header = UnregisterBrokerRequestHeader(
            self.config.broker_name, self.broker_addr, self.config.broker_cluster_name, self.config.broker_id
        )

        async def unregister(namesrv: str) -> None:
            try:
                await self.client.invoke(namesrv, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header), 3)
            except RocketMQError as exc:
                log.warning("unregistering from name server %s failed: %s", namesrv, exc)

        await asyncio.gather(*(unregister(addr) for addr in self.namesrv_addrs))
