"""`BrokerController`: builds the managers, the store and the processors, and runs them.

Like Apache RocketMQ's BrokerController, but only wiring: state lives in the managers and the
store, request handling in the processors. Processors see the controller only through the narrow
protocols of broker.context, each declaring the parts it reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from broker.acl.guard import GuardedProcessorTable
from broker.acl.watcher import POLL_INTERVAL_S, AclFileWatcher, accounts_file
from broker.config import BrokerConfig
from broker.flavor import Flavor, flavored
from broker.grpc.auth import GrpcAuthorizer
from broker.grpc.consuming import ConsumingService
from broker.grpc.server import GrpcServer
from broker.managers.consumer_manager import ConsumerGroupInfo, ConsumerManager
from broker.managers.consumer_offset_manager import ConsumerOffsetManager
from broker.managers.producer_manager import ProducerManager
from broker.managers.rebalance_lock_manager import RebalanceLockManager
from broker.managers.subscription_group_manager import SubscriptionGroupManager
from broker.managers.topic_config_manager import TopicConfigManager
from broker.processors.admin_broker import BrokerAdminProcessor
from broker.processors.admin_group import GroupAdminProcessor
from broker.processors.admin_offset import OffsetAdminProcessor
from broker.processors.admin_topic import TopicAdminProcessor
from broker.processors.arrow import ArrowSendProcessor
from broker.processors.arrow_half import ArrowHalfSendProcessor
from broker.processors.client_manage import ClientManageProcessor
from broker.processors.consumer_manage import ConsumerManageProcessor
from broker.processors.end_transaction import EndTransactionProcessor
from broker.processors.lock import LockProcessor
from broker.processors.pull import PullMessageProcessor
from broker.processors.query_message import QueryMessageProcessor
from broker.processors.send import SendMessageProcessor
from broker.processors.send_back import SendBackProcessor
from broker.pull_request_hold_service import PullRequestHoldService
from broker.registration import NamesrvRegistration
from broker.schedule.delay_levels import DelayLevels
from broker.schedule.parking import Parking
from broker.schedule.service import ScheduleMessageService
from broker.schedule.timer_service import TimerMessageService
from broker.stats import BrokerStats
from broker.store.config import StoreConfig
from broker.store.message_store import MessageStore
from broker.transaction.apache import ApacheTransactionService
from broker.transaction.service import CheckSettings, TransactionService
from rocketspark.errors import RocketMQError
from rocketspark.fileutil import AtomicFileWriter
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.client import ConsumerGroupRequestHeader
from rocketspark.remoting.client import RemotingClient
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.server import RemotingServer
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)

#: how often the broker gives freed memory back to the OS (broker/memory.py)
TRIM_MEMORY_INTERVAL_S = 10.0


class BrokerController:
    def __init__(
        self, config: BrokerConfig, store_config: StoreConfig, *, trim_memory: Callable[[], None] | None = None
    ) -> None:
        """`trim_memory`: gives the allocator's free pages back to the OS; run every TRIM_MEMORY_INTERVAL_S."""
        config, store_config = flavored(config, store_config)
        self.config = config
        self.store_config = store_config
        config_dir = store_config.store_path_root_dir / "config"
        # with ACL on, every processor registered in the table runs behind the access check
        self.acl = AclFileWatcher(accounts_file(config.plain_acl_file)) if config.acl_enable else None
        self.processors = GuardedProcessorTable(self.acl.validator) if self.acl else ProcessorTable()
        self.server = RemotingServer(
            self.processors,
            host=config.listen_host,
            port=config.listen_port,
            idle_timeout_s=config.server_channel_max_idle_time_seconds,
            max_frame_length=config.frame_max_length,
            max_in_flight_per_connection=config.max_in_flight_requests_per_connection,
            tls=config.server_tls(),
        )
        self.client = RemotingClient(use_tls=config.tls_enable, tls_trust=config.tls_client_trust_cert_path)
        self.stats = BrokerStats()
        # config files are fsynced on a thread of their own, never on the event loop
        self._config_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="config-io")
        self._config_writers = [
            AtomicFileWriter(config_dir / name, self._config_io)
            for name in (
                "topics.json",
                "subscriptionGroup.json",
                "consumerOffset.json",
                "delayOffset.json",
                "transaction.json",
                "timerProgress.json",
            )
        ]
        topics_writer, groups_writer, offsets_writer, delay_writer, transaction_writer, timer_writer = (
            self._config_writers
        )
        self.topics = TopicConfigManager(config, topics_writer, self._topics_changed)
        self.subscription_groups = SubscriptionGroupManager(groups_writer, config.auto_create_subscription_group)
        self.consumer_offsets = ConsumerOffsetManager(offsets_writer)
        self.consumers = ConsumerManager(config.channel_expired_timeout, self._notify_consumer_ids_changed)
        self.producers = ProducerManager(config.channel_expired_timeout)
        self.locks = RebalanceLockManager(config.rebalance_lock_max_live_time)
        self.hold = PullRequestHoldService(config.max_held_pull_requests)
        self.address = config.broker_addr
        self.store = MessageStore(store_config, self.address)
        self.delay_levels = DelayLevels(store_config.delay_levels_ms())
        self.schedule = ScheduleMessageService(self.store, self.delay_levels, delay_writer)
        # flavor=apache: Apache 4.9 has no timer messages (broker/schedule/parking.py)
        timers = config.flavor is not Flavor.apache
        max_delay_s = store_config.timer_max_delay_sec if timers else None
        self.parking = Parking(self.delay_levels, timer_max_delay_s=max_delay_s)
        self.timers = (
            TimerMessageService(self.store, timer_writer, roll_after_ms=store_config.timer_roll_after_ms)
            if timers
            else None
        )
        checks = CheckSettings(
            config.transaction_time_out, config.transaction_check_interval, config.transaction_check_max
        )
        service = ApacheTransactionService if config.flavor is Flavor.apache else TransactionService
        self.transactions = service(
            self.store,
            self.producers,
            checks,
            transaction_writer,
            lambda topic: self.topics.create_internal_topic(topic, 1),
        )
        self.registration: NamesrvRegistration | None = None
        self.grpc: GrpcServer | None = None
        self._services = [
            PeriodicService(
                "persist-consumer-offsets", config.flush_consumer_offset_interval / 1000, self.consumer_offsets.persist
            ),
            PeriodicService("scan-client-channels", config.client_channel_scan_interval / 1000, self._scan_channels),
            PeriodicService("sample-stats", 1.0, self.stats.sampling.tick, initial_delay_s=0),
        ]
        if self.acl is not None:
            self._services.append(PeriodicService("acl-file-watch", POLL_INTERVAL_S, self.acl.poll))
        if trim_memory is not None:
            self._services.append(PeriodicService("return-freed-memory", TRIM_MEMORY_INTERVAL_S, trim_memory))

    async def start(self) -> None:
        await self.server.start(serving=False)
        self.address = f"{self.config.broker_ip1}:{self.server.port}"
        self.store.store_host = self.address
        await self.store.start()
        self.store.add_arrival_listener(self.hold.notify)
        self.store.add_arrival_listener(lambda topic, _queue, _max, tags: self.stats.stored(topic, len(tags)))
        self.topics.load()
        self.subscription_groups.load()
        self.consumer_offsets.load()
        self.schedule.load()
        if self.timers is not None:
            await self.timers.load()
        await self.transactions.load()
        send_processor = SendMessageProcessor(self)
        for processor in (
            send_processor,
            SendBackProcessor(self),
            ArrowSendProcessor(self),
            ArrowHalfSendProcessor(self),
            PullMessageProcessor(self),
            ConsumerManageProcessor(self),
            ClientManageProcessor(self),
            TopicAdminProcessor(self),
            OffsetAdminProcessor(self),
            GroupAdminProcessor(self),
            BrokerAdminProcessor(self),
            QueryMessageProcessor(self),
            LockProcessor(self),
            EndTransactionProcessor(self),
        ):
            processor.register(self.processors)
        self.server.add_close_listener(self._connection_closed)
        if self.config.grpc_server_port:
            authorizer = GrpcAuthorizer(self.acl.validator) if self.acl is not None else None
            self.grpc = GrpcServer(self, send_processor, ConsumingService(self), authorizer)
            await self.grpc.start()
        await self.server.start_serving()
        self.registration = NamesrvRegistration(self.config, self.address, self.client, self.topics.wrapper)
        await self.registration.start()
        for service in self._services:
            service.start()
        self.schedule.start()
        if self.timers is not None:
            self.timers.start()
        self.transactions.start()
        log.info(
            "broker %s (cluster %s) serving at %s",
            self.config.broker_name,
            self.config.broker_cluster_name,
            self.address,
        )

    async def stop(self) -> None:
        """Unregister, stop serving, write every accepted message, flush, persist offsets."""
        if self.registration is not None:
            await self.registration.stop()
        await self.server.stop()
        if self.grpc is not None:
            await self.grpc.stop()
        for service in self._services:
            await service.stop()
        await self.schedule.stop()
        if self.timers is not None:
            await self.timers.stop()
        await self.transactions.stop()
        await self.store.stop()
        await self.consumer_offsets.persist()
        for writer in self._config_writers:
            await writer.flush()
        self._config_io.shutdown(wait=True)
        await self.client.close()
        log.info("broker %s stopped", self.config.broker_name)

    def _topics_changed(self) -> None:
        if self.registration is not None:
            self.registration.trigger()

    def _connection_closed(self, connection: Connection) -> None:
        self.consumers.connection_closed(connection)
        self.producers.connection_closed(connection)

    def _scan_channels(self) -> None:
        self.consumers.scan_expired()
        self.producers.scan_expired()

    def _notify_consumer_ids_changed(self, group: ConsumerGroupInfo) -> None:
        for connection in list(group.channels):
            request = RemotingCommand.request(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ConsumerGroupRequestHeader(group.group_name), oneway=True
            )
            try:
                connection.invoke_oneway(request)
            except RocketMQError as exc:
                log.debug("could not notify %s of group %s: %s", connection.remote_address, group.group_name, exc)
