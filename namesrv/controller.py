"""`NamesrvController`: wires the route tables, KV config, processors, server and liveness scan."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from namesrv.config import NamesrvConfig
from namesrv.kvconfig_manager import KVConfigManager
from namesrv.processor import NamesrvProcessor
from namesrv.route_info_manager import RouteInfoManager
from namesrv.write_guard import WriteGuardedTable
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.server import RemotingServer
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)


class NamesrvController:
    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.routes = RouteInfoManager(broker_expired_ms=config.broker_channel_expired_ms)
        self._config_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="config-io")
        self.kv_config = KVConfigManager(AtomicFileWriter(config.kv_config_path, self._config_io))
        allowed = config.write_allow_list
        self.processors = WriteGuardedTable(allowed) if allowed is not None else ProcessorTable()
        self.server = RemotingServer(
            self.processors,
            host=config.host,
            port=config.port,
            idle_timeout_s=config.server_channel_max_idle_s,
            max_frame_length=config.frame_max_length,
            tls=config.server_tls(),
        )
        self.server.add_close_listener(self.routes.on_channel_destroy)
        self._scan = PeriodicService(
            "namesrv-scan-not-active-broker",
            config.scan_not_active_broker_interval_ms / 1000,
            self.routes.scan_not_active_brokers,
            initial_delay_s=min(5.0, config.scan_not_active_broker_interval_ms / 1000),
        )

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> None:
        self.kv_config.load()
        await self.server.start()
        NamesrvProcessor(self.routes, self.kv_config, self.server.address).register(self.processors)
        self._scan.start()

    async def stop(self) -> None:
        await self._scan.stop()
        await self.server.stop()
        await self.kv_config.writer.flush()
        self._config_io.shutdown(wait=True)
        log.info("name server %s stopped", self.address)
