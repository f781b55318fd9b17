"""What the request processors may use of the broker: one read-only protocol per part of it.

Processors are given these narrow views instead of the `BrokerController`: each declares the few
parts it reads by combining the protocols below (as rocketmq-rust hands its processors a context),
and the controller, which builds the managers and the store, has them all. So processors depend on
the managers and the store, never on broker.controller, which imports them to wire them up.
"""

from __future__ import annotations

from typing import Protocol

from broker.config import BrokerConfig
from broker.managers.consumer_manager import ConsumerManager
from broker.managers.consumer_offset_manager import ConsumerOffsetManager
from broker.managers.producer_manager import ProducerManager
from broker.managers.rebalance_lock_manager import RebalanceLockManager
from broker.managers.subscription_group_manager import SubscriptionGroupManager
from broker.managers.topic_config_manager import TopicConfigManager
from broker.pull_request_hold_service import PullRequestHoldService
from broker.schedule.delay_levels import DelayLevels
from broker.schedule.parking import Parking
from broker.stats import BrokerStats
from broker.store.config import StoreConfig
from broker.store.message_store import MessageStore
from broker.transaction.service import TransactionService


class HasConfig(Protocol):
    @property
    def config(self) -> BrokerConfig: ...


class HasStoreConfig(Protocol):
    @property
    def store_config(self) -> StoreConfig: ...


class HasAddress(Protocol):
    @property
    def address(self) -> str:
        """The broker's "ip:port", as offset msgIds and records name it."""
        ...


class HasStore(Protocol):
    @property
    def store(self) -> MessageStore: ...


class HasStats(Protocol):
    @property
    def stats(self) -> BrokerStats: ...


class HasTopics(Protocol):
    @property
    def topics(self) -> TopicConfigManager: ...


class HasSubscriptionGroups(Protocol):
    @property
    def subscription_groups(self) -> SubscriptionGroupManager: ...


class HasConsumerOffsets(Protocol):
    @property
    def consumer_offsets(self) -> ConsumerOffsetManager: ...


class HasConsumers(Protocol):
    @property
    def consumers(self) -> ConsumerManager: ...


class HasProducers(Protocol):
    @property
    def producers(self) -> ProducerManager: ...


class HasLocks(Protocol):
    @property
    def locks(self) -> RebalanceLockManager: ...


class HasHold(Protocol):
    @property
    def hold(self) -> PullRequestHoldService: ...


class HasDelayLevels(Protocol):
    @property
    def delay_levels(self) -> DelayLevels:
        """The delays of the levels (messageDelayLevel), for delayed messages and retries."""
        ...


class HasParking(Protocol):
    @property
    def parking(self) -> Parking:
        """Where a sent message waits until due: delay levels and timer messages (broker/schedule/parking.py)."""
        ...


class HasTransactions(Protocol):
    @property
    def transactions(self) -> TransactionService:
        """Half messages: their ends and their check (broker/transaction/)."""
        ...
