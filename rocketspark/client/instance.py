"""`ClientInstance`: the connections, routes and heartbeats that producers and consumers share.

One instance per event loop and name-server list (as Java's MQClientInstance per client id), but
it owns only connections, the route cache and heartbeats: producer and consumer logic live in their
own modules and register what they need here (their group for heartbeats, their topics for route
refreshes, callbacks for membership changes and for offset resets). Every timer runs in a service
that `shutdown()` stops.

The brokers' requests to the client (Java's ClientRemotingProcessor) are answered here and handed
on: CHECK_TRANSACTION_STATE to the transaction producer of the message's group,
NOTIFY_CONSUMER_IDS_CHANGED and RESET_CONSUMER_CLIENT_OFFSET to the consumer of the group.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from rocketspark.client.api import client_manage
from rocketspark.client.config import ClientConfig
from rocketspark.client.lifecycle import Lifecycle, ServiceState
from rocketspark.client.namesrv import NameServerList
from rocketspark.client.routes import master_addresses
from rocketspark.errors import (
    BrokerNotAvailableError,
    ResponseError,
    RocketMQError,
    TopicNotExistError,
    ValidationError,
)
from rocketspark.message.message import MessageExt
from rocketspark.message.properties import codec as props
from rocketspark.message.records.scalar import decode_small, record_bounds
from rocketspark.message.validation import validate_client_group
from rocketspark.protocol.body.heartbeat import ConsumerData, HeartbeatData, ProducerData
from rocketspark.protocol.body.route import TopicRouteData
from rocketspark.protocol.body.stats import ResetOffsetBody
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.admin import ResetOffsetRequestHeader
from rocketspark.protocol.headers.namesrv import GetRouteInfoRequestHeader
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.client import RemotingClient
from rocketspark.remoting.connection import Connection
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)

_instance_numbers = itertools.count()


#: answers a broker's CHECK_TRANSACTION_STATE: (the broker's connection, the request, the half message)
TransactionChecker = Callable[[Connection, RemotingCommand, MessageExt], None]
#: takes a broker's RESET_CONSUMER_CLIENT_OFFSET: (the topic, the offset of each of its queues on that broker)
OffsetReset = Callable[[str, Mapping[MessageQueue, int]], None]


def unique_instance_name() -> str:
    """`pid#nanotime`, unique within a process (Java's `changeInstanceNameToPID` plus the nano time)."""
    return f"{os.getpid()}#{time.time_ns() + next(_instance_numbers)}"


def new_client_id(ip: str, instance_name: str) -> str:
    """`ip@pid#nanotime` (Java's format when the instance name is DEFAULT); unique within a process."""
    if instance_name == "DEFAULT":
        instance_name = unique_instance_name()
    return f"{ip}@{instance_name}"


@dataclass(eq=False)
class ConsumerRegistration:
    """What a consumer tells the instance: its heartbeat data, topics, and who to tell of member changes."""

    group: str
    consumer_data: Callable[[], ConsumerData]
    topics: Callable[[], Iterable[str]]
    on_ids_changed: Callable[[], None] | None = None
    on_reset_offset: OffsetReset | None = None


class ClientInstance:
    # (name servers, client ip, instance name, credentials, TLS, event loop) -> (instance, users), as Java
    # keys instances by client id: two members of one group in one process need distinct instance names;
    # clients with other credentials (or none) or TLS settings get their own instance: both are per
    # connection set
    _shared: ClassVar[dict[tuple[object, ...], tuple[ClientInstance, int]]] = {}

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.client_id = new_client_id(config.client_ip, config.instance_name)
        processors = ProcessorTable()
        processors.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._consumer_ids_changed)
        processors.register(RequestCode.CHECK_TRANSACTION_STATE, self._check_transaction_state)
        processors.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._reset_consumer_offset)
        self.remoting = RemotingClient(
            processors,
            connect_timeout_s=config.connect_timeout_ms / 1000,
            request_timeout_s=config.request_timeout_ms / 1000,
            idle_timeout_s=config.idle_timeout_s,
            credentials=config.credentials,
            use_tls=config.use_tls,
            tls_trust=config.tls_trust,
        )
        self.namesrv = NameServerList(self.remoting, config.namesrv_addresses())
        self.routes: dict[str, TopicRouteData] = {}
        # a route being fetched for callers that found none cached: they all wait for one request
        self._route_fetches: dict[str, asyncio.Future[TopicRouteData | None]] = {}
        self.broker_addresses: dict[str, str] = {}  # broker name -> master address
        self.broker_versions: dict[str, int] = {}
        self._producers: dict[str, set[str]] = {}  # producer group -> the topics it sends to
        self._consumers: dict[str, ConsumerRegistration] = {}
        # producer group -> what answers the brokers' CHECK_TRANSACTION_STATE for it (transaction.py)
        self._transaction_checkers: dict[str, TransactionChecker] = {}
        self._unanswered_checks: set[tuple[str, str]] = set()  # (broker, group) asked about with nobody to answer
        self._routed_since_refresh: set[str] = set()  # topics asked for outside producers and consumers
        self._lifecycle = Lifecycle(f"client instance {self.client_id}")
        self._failing_brokers: set[str] = set()
        self._route_refresh = PeriodicService(
            "client-route-refresh",
            config.poll_name_server_interval_ms / 1000,
            self.refresh_routes,
            initial_delay_s=0.01,
        )
        self._services = [
            self._route_refresh,
            PeriodicService(
                "client-heartbeat", config.heartbeat_broker_interval_ms / 1000, self.heartbeat, initial_delay_s=1.0
            ),
        ]

    # -- sharing and lifecycle -----------------------------------------------------------------

    @classmethod
    async def acquire(cls, config: ClientConfig) -> ClientInstance:
        """The running instance of this event loop for `config`'s name servers (started on first use)."""
        loop = id(asyncio.get_running_loop())
        network = (config.credentials, config.use_tls, config.tls_trust)
        key = (config.namesrv_addresses(), config.client_ip, config.instance_name, *network, loop)
        shared = cls._shared.get(key)
        if shared is not None and shared[0].state is ServiceState.RUNNING:
            cls._shared[key] = (shared[0], shared[1] + 1)
            return shared[0]
        instance = cls(config)
        await instance.start()
        cls._shared[key] = (instance, 1)
        return instance

    async def release(self) -> None:
        """Give back an instance from `acquire`; the last user shuts it down."""
        for key, (instance, users) in list(self._shared.items()):
            if instance is self:
                if users > 1:
                    self._shared[key] = (instance, users - 1)
                    return
                del self._shared[key]
        await self.shutdown()

    @property
    def state(self) -> ServiceState:
        return self._lifecycle.state

    @property
    def route_refreshes(self) -> int:
        """How many periodic route refreshes have finished (the first runs 10 ms after the start)."""
        return self._route_refresh.completed_runs

    async def start(self) -> None:
        self._lifecycle.begin_start()
        try:
            for service in self._services:
                service.start()
        except BaseException:
            self._lifecycle.state = ServiceState.START_FAILED
            raise
        self._lifecycle.state = ServiceState.RUNNING
        log.info("client instance %s started (name servers %s)", self.client_id, ";".join(self.namesrv.addresses))

    async def shutdown(self) -> None:
        if self.state is not ServiceState.RUNNING:
            return
        self._lifecycle.state = ServiceState.SHUTDOWN_ALREADY
        for service in self._services:
            await service.stop()
        await self.remoting.close()
        log.info("client instance %s shut down", self.client_id)

    def require_running(self) -> None:
        self._lifecycle.require_running()

    # -- groups --------------------------------------------------------------------------------

    def register_producer(self, group: str) -> None:
        validate_client_group(group)
        if group in self._producers:
            raise ValidationError(f"producer group {group} is already registered in client {self.client_id}")
        self._producers[group] = set()

    async def unregister_producer(self, group: str) -> None:
        """Forget the producer group and tell every known broker (UNREGISTER_CLIENT)."""
        self._producers.pop(group, None)
        self._transaction_checkers.pop(group, None)
        await self._unregister_from_brokers("producer", group)

    def register_consumer(self, registration: ConsumerRegistration) -> None:
        validate_client_group(registration.group)
        if registration.group in self._consumers:
            raise ValidationError(
                f"consumer group {registration.group} is already registered in client {self.client_id}"
            )
        self._consumers[registration.group] = registration

    async def unregister_consumer(self, group: str) -> None:
        """Forget the consumer group and tell every known broker (UNREGISTER_CLIENT), so its
        remaining members rebalance at once instead of after the channel expiry."""
        self._consumers.pop(group, None)
        await self._unregister_from_brokers("consumer", group)

    async def _unregister_from_brokers(self, role: str, group: str) -> None:
        groups = {"producer_group": group} if role == "producer" else {"consumer_group": group}
        for address in set(self.broker_addresses.values()):
            try:
                await client_manage.unregister_client(self.remoting, address, self.client_id, timeout_s=1, **groups)
            except RocketMQError as exc:
                log.debug("unregistering %s %s from %s failed: %s", role, group, address, exc)

    def set_transaction_checker(self, group: str, checker: TransactionChecker) -> None:
        """Hand the brokers' CHECK_TRANSACTION_STATE for producer `group` (registered) to `checker`."""
        self._transaction_checkers[group] = checker

    def _check_transaction_state(self, connection: Connection, request: RemotingCommand) -> None:
        """A broker asks about a half message: the producer of its group (PGROUP) answers, as Java's
        client instance hands the check to the producer of the group."""
        try:
            body = request.body or b""
            (message,) = decode_small(body, record_bounds(body))
        except (ValueError, RocketMQError) as exc:
            log.warning("broker %s: undecodable transaction check: %s", connection.remote_address, exc)
            return
        group = message.properties.get(props.PRODUCER_GROUP, "")
        checker = self._transaction_checkers.get(group)
        if checker is None:  # said once per broker and group: a broker asks about every half message
            level = logging.DEBUG if (connection.remote_address, group) in self._unanswered_checks else logging.WARNING
            self._unanswered_checks.add((connection.remote_address, group))
            log.log(level, "broker %s: no transaction producer of group %s here", connection.remote_address, group)
            return
        checker(connection, request, message)

    def _consumer_ids_changed(self, connection: Connection, request: RemotingCommand) -> None:
        group = request.ext_fields.get("consumerGroup", "")
        registration = self._consumers.get(group)
        log.info("broker %s: members of group %s changed", connection.remote_address, group)
        if registration is not None and registration.on_ids_changed is not None:
            registration.on_ids_changed()

    def _reset_consumer_offset(self, connection: Connection, request: RemotingCommand) -> None:
        """A broker relays an admin tool's reset of a group's offsets of a topic
        (INVOKE_BROKER_TO_RESET_OFFSET, with the offsets of its queues): the consumer of the group
        here takes them, as Java's ClientRemotingProcessor.resetOffset hands them to its consumer."""
        try:
            header = request.decode_header(ResetOffsetRequestHeader)
            offsets = ResetOffsetBody.from_json(request.body).offset_table if request.body else {}
        except (ValueError, KeyError, TypeError, RocketMQError) as exc:
            log.warning("broker %s: undecodable offset reset: %s", connection.remote_address, exc)
            return
        registration = self._consumers.get(header.group)
        if registration is None or registration.on_reset_offset is None:
            log.info("broker %s: no consumer of group %r here to reset", connection.remote_address, header.group)
            return
        log.info(
            "broker %s: group %r resets %d queue(s) of topic %r to time %d",
            connection.remote_address,
            header.group,
            len(offsets),
            header.topic,
            header.timestamp,
        )
        registration.on_reset_offset(header.topic, offsets)

    # -- routes --------------------------------------------------------------------------------

    def topics_in_use(self) -> set[str]:
        """Topics of registered producers and consumers: the routes `refresh_routes` keeps fresh."""
        topics = set().union(*self._producers.values())
        for registration in self._consumers.values():
            topics.update(registration.topics())
        return topics

    async def fetch_route(self, topic: str) -> TopicRouteData | None:
        """Ask the name servers; None when no broker serves the topic. Caches and announces changes."""
        self._routed_since_refresh.add(topic)
        request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic, True))
        response = await self.namesrv.invoke(request)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if response.code != ResponseCode.SUCCESS:
            context = f"route of {topic} from {self.namesrv.current}"
            raise ResponseError.for_code(response.code, response.remark, context)
        route = TopicRouteData.from_json(response.body)
        if self.routes.get(topic) != route:
            self.routes[topic] = route
            self.broker_addresses.update(master_addresses(route))
        return route

    async def route(self, topic: str, *, refresh: bool = False) -> TopicRouteData:
        """The topic's route, from the cache unless `refresh`; TopicNotExistError names topic and name server."""
        self.require_running()
        cached = None if refresh else self.routes.get(topic)
        if cached is not None:
            self._routed_since_refresh.add(topic)
            return cached
        route = await (self.fetch_route(topic) if refresh else self._fetch_once(topic))
        if route is None:
            raise TopicNotExistError(
                f"topic {topic} is not known to the name server {self.namesrv.current}: "
                "create it, or send to it once with automatic topic creation on",
                code=ResponseCode.TOPIC_NOT_EXIST,
            )
        return route

    async def _fetch_once(self, topic: str) -> TopicRouteData | None:
        """:meth:`fetch_route`, shared by every caller that asks while it runs: overlapping first
        sends of a producer would otherwise each ask the name server (hundreds at once at 1,000
        sends a second when the first answer is slow), and each decode the route."""
        pending = self._route_fetches.get(topic)
        if pending is None:
            pending = asyncio.ensure_future(self.fetch_route(topic))
            self._route_fetches[topic] = pending
            pending.add_done_callback(lambda done: self._fetch_done(topic, done))
        return await asyncio.shield(pending)  # one caller cancelled leaves the others their answer

    def _fetch_done(self, topic: str, done: asyncio.Future[TopicRouteData | None]) -> None:
        if self._route_fetches.get(topic) is done:
            del self._route_fetches[topic]
        if not done.cancelled():
            done.exception()  # retrieved here: every caller may have been cancelled meanwhile

    def use_topic(self, group: str, topic: str) -> None:
        """Keep `topic`'s route fresh while producer `group` is registered (it sends to `topic`)."""
        self._producers[group].add(topic)

    async def broker_address(self, broker_name: str, topic: str | None = None) -> str:
        """The master address of `broker_name`, refreshing `topic`'s route once when unknown."""
        if topic is not None:
            self._routed_since_refresh.add(topic)
        address = self.broker_addresses.get(broker_name)
        if address is None and topic is not None:
            await self.route(topic, refresh=True)
            address = self.broker_addresses.get(broker_name)
        if address is None:
            raise BrokerNotAvailableError(f"broker {broker_name} has no master address in the current routes")
        return address

    async def refresh_routes(self) -> None:
        """Refresh the routes of the topics in use, evict the others (a route asked for directly is
        kept until the refresh after the last ask), and forget brokers no route lists: heartbeats
        and unregistrations go only to brokers of topics in use."""
        in_use = self.topics_in_use()
        for topic in sorted(in_use):
            try:
                # shared with a first send's fetch still under way (the first refresh runs 10 ms after
                # the start): its answer is as fresh as a new one
                await self._fetch_once(topic)
            except RocketMQError as exc:
                log.warning("refreshing the route of %s failed: %s", topic, exc)
        keep = in_use | self._routed_since_refresh
        self._routed_since_refresh = set()
        for topic in [t for t in self.routes if t not in keep]:
            log.debug("topic %s is no longer used; dropping its route", topic)
            del self.routes[topic]
        live: set[str] = set()
        for route in self.routes.values():
            live.update(master_addresses(route))
        for name in [n for n in self.broker_addresses if n not in live]:
            log.info("broker %s is in no route in use any more; forgetting it", name)
            del self.broker_addresses[name]
            self.broker_versions.pop(name, None)
            self._failing_brokers.discard(name)

    # -- heartbeats ----------------------------------------------------------------------------

    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            self.client_id,
            producer_data_set=[ProducerData(g) for g in sorted(self._producers)],
            consumer_data_set=[r.consumer_data() for r in self._consumers.values()],
        )

    async def heartbeat(self) -> None:
        """Tell every known broker master which groups this client runs."""
        data = self.heartbeat_data()
        if not data.producer_data_set and not data.consumer_data_set:
            return
        await asyncio.gather(*(self._heartbeat_one(n, a, data) for n, a in list(self.broker_addresses.items())))

    async def _heartbeat_one(self, broker_name: str, address: str, data: HeartbeatData) -> None:
        try:
            self.broker_versions[broker_name] = await client_manage.send_heartbeat(self.remoting, address, data)
        except RocketMQError as exc:
            if broker_name not in self._failing_brokers:
                log.warning("heartbeat to broker %s (%s) failed: %s", broker_name, address, exc)
                self._failing_brokers.add(broker_name)
            return
        self._failing_brokers.discard(broker_name)
