"""`AsyncLitePullConsumer`: poll messages (or Arrow batches) from subscribed or assigned queues.

As Java's DefaultLitePullConsumer: one background pull per assigned queue keeps a buffer filled
(long polling on the broker), pausing while the queue's buffered messages reach
`pull_threshold_for_queue` or their bodies `pull_threshold_size_for_queue` MiB; `poll()` takes what
is buffered. Progress is "next offset to consume" per queue, committed to the broker (clustering) or
a local file (broadcasting) every `auto_commit_interval_ms`, or by `commit()`.

An admin tool's reset of the group's offsets to a time (RESET_CONSUMER_CLIENT_OFFSET from a broker;
Apache's Java lite-pull consumer ignores it) seeks the consumer's queues of the topic to the
broker's offsets, dropping what was buffered of them, and with auto-commit commits them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.client.api import offset as offset_api
from rocketspark.client.api.pull import PullStatus
from rocketspark.client.config import ClientConfig, client_config_for
from rocketspark.client.consumer import allocation
from rocketspark.client.consumer.offset_store import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore
from rocketspark.client.consumer.puller import Pulled, QueuePuller
from rocketspark.client.consumer.rebalance import Rebalancer
from rocketspark.client.consumer.start_offset import compute_start_offset
from rocketspark.client.consumer.time_offsets import offset_for_time
from rocketspark.client.consumer.undecodable import OneByOne
from rocketspark.client.instance import ClientInstance, ConsumerRegistration
from rocketspark.client.lifecycle import AsyncClient, Lifecycle, ServiceState
from rocketspark.client.routes import subscribe_queues
from rocketspark.errors import DecodeError, RocketMQError, ValidationError
from rocketspark.message.filter import build_subscription
from rocketspark.message.message import MessageExt
from rocketspark.message.validation import validate_topic
from rocketspark.protocol.body.heartbeat import ConsumeFromWhere, ConsumerData, ConsumeType, MessageModel
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.signing import SessionCredentials
from rocketspark.remoting.tls import TrustSetting
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)

Polled = list[MessageExt] | list[pa.RecordBatch]


@dataclass(eq=False)
class _QueueState:
    queue: MessageQueue
    next_offset: int  # next offset to pull
    consumed_offset: int  # next offset to hand to poll(): what commits store
    cached: int = 0  # messages pulled but not yet polled
    cached_bytes: int = 0  # their body bytes
    version: int = 0  # bumped by seek; buffered results of older versions are dropped
    one_by_one: OneByOne = field(default_factory=OneByOne)  # finds a message that does not decode
    task: asyncio.Task[None] | None = None


@dataclass(frozen=True, slots=True)
class _Pulled:
    state: _QueueState
    version: int
    count: int
    size: int  # body bytes
    next_offset: int  # where the pull that brought the payload ended (filtered-out messages included)
    payload: list[MessageExt] | list[pa.RecordBatch]


def _body_bytes(payload: list[MessageExt] | list[pa.RecordBatch]) -> int:
    """What a pull brought counts against `pull_threshold_size_for_queue` by its (inflated) bodies."""
    return sum(
        int(pc.sum(pc.binary_length(item.column("body"))).as_py())
        if isinstance(item, pa.RecordBatch)
        else len(item.body)
        for item in payload
    )


@dataclass
class _Subscriptions:
    expressions: dict[str, str] = field(default_factory=dict)  # subscribe mode: topic -> tag expression
    assigned: list[MessageQueue] | None = None  # assign mode


class AsyncLitePullConsumer(AsyncClient):
    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | None = None,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        message_model: MessageModel = MessageModel.CLUSTERING,
        allocate_strategy: str = "AVG",
        pull_batch_size: int = 32,
        arrow: bool = False,
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        pull_threshold_for_queue: int = 10_000,
        pull_threshold_size_for_queue: int = 100,
        broker_suspend_max_time_ms: int = 20_000,
        pull_delay_on_error_ms: int = 1_000,
        rebalance_interval_ms: int = 20_000,
        offset_store_dir: Path | None = None,
        client_config: ClientConfig | None = None,
        credentials: SessionCredentials | None = None,
        use_tls: bool = False,
        tls_trust: TrustSetting = None,
    ) -> None:
        if min(pull_batch_size, pull_threshold_for_queue, pull_threshold_size_for_queue) <= 0:
            raise ValidationError(
                "pull_batch_size, pull_threshold_for_queue and pull_threshold_size_for_queue must be positive"
            )
        self.group = group
        self.client_config = client_config_for(client_config, namesrv_addr, credentials, use_tls, tls_trust)
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms or int(time.time() * 1000) - 30 * 60 * 1000
        self.message_model = message_model
        self.strategy = allocation.strategy(allocate_strategy)
        self.pull_batch_size = pull_batch_size
        self.arrow = arrow
        self.auto_commit = auto_commit
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue  # MiB, as in Java
        self.broker_suspend_max_time_ms = broker_suspend_max_time_ms
        self.pull_delay_on_error_s = pull_delay_on_error_ms / 1000
        self.offset_store_dir = offset_store_dir or Path.home() / ".rocketmq_offsets"
        self.instance: ClientInstance | None = None
        self.offset_store: OffsetStore | None = None
        self._puller: QueuePuller | None = None
        self._lifecycle = Lifecycle(f"lite pull consumer {group}")
        self._subscriptions = _Subscriptions()
        self._queues: dict[MessageQueue, _QueueState] = {}
        self._buffer: asyncio.Queue[_Pulled] = asyncio.Queue()
        self._rebalance_lock = asyncio.Lock()
        self._reset_tasks: set[asyncio.Task[None]] = set()
        self._services = [
            PeriodicService("lite-pull-rebalance", rebalance_interval_ms / 1000, self._rebalance, initial_delay_s=0),
            PeriodicService("lite-pull-auto-commit", auto_commit_interval_ms / 1000, self._auto_commit),
        ]
        self._failing: set[MessageQueue] = set()

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._lifecycle.begin_start()
        try:
            instance = await ClientInstance.acquire(self.client_config)
            try:
                registration = ConsumerRegistration(
                    self.group, self._consumer_data, self._topics, self._services[0].trigger, self._reset_notice
                )
                instance.register_consumer(registration)
            except BaseException:
                await instance.release()
                raise
        except BaseException:
            self._lifecycle.state = ServiceState.START_FAILED
            raise
        self.instance = instance
        self._puller = QueuePuller(instance, self.group, use_arrow=self.arrow)
        if self.message_model is MessageModel.BROADCASTING:
            self.offset_store = LocalFileOffsetStore(
                self.offset_store_dir / instance.client_id.split("@")[0], self.group
            )
        else:
            self.offset_store = RemoteBrokerOffsetStore(instance, self.group)
        await self.offset_store.load()
        self._lifecycle.state = ServiceState.RUNNING
        await self._register_with_brokers()
        self._services[0].start()
        if self.auto_commit:
            self._services[1].start()

    async def shutdown(self) -> None:
        if self._lifecycle.state is not ServiceState.RUNNING or self.instance is None:
            return
        for service in self._services:
            await service.stop()
        await asyncio.gather(*self._reset_tasks, return_exceptions=True)
        for state in list(self._queues.values()):
            await self._stop_pulling(state)
        if self.auto_commit:
            await self._auto_commit()
        self._lifecycle.state = ServiceState.SHUTDOWN_ALREADY
        await self.instance.unregister_consumer(self.group)
        await self.instance.release()

    def _running(self) -> tuple[ClientInstance, OffsetStore, QueuePuller]:
        self._lifecycle.require_running()
        assert self.instance is not None and self.offset_store is not None and self._puller is not None
        return self.instance, self.offset_store, self._puller

    # -- what to read --------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Read `topic` (messages matching the tag expression) with the group's share of its queues."""
        validate_topic(topic)
        if self._subscriptions.assigned is not None:
            raise ValidationError("this consumer assigns queues itself; subscribe() and assign() do not mix")
        build_subscription(topic, expression)  # validates the expression
        self._subscriptions.expressions[topic] = expression
        for service in self._services[:1]:
            service.trigger()

    def assign(self, queues: list[MessageQueue]) -> None:
        """Read exactly these queues (no rebalancing with other members)."""
        if self._subscriptions.expressions:
            raise ValidationError("this consumer subscribes to topics; subscribe() and assign() do not mix")
        self._subscriptions.assigned = sorted(queues)
        self._services[0].trigger()

    def assignment(self) -> set[MessageQueue]:
        return set(self._queues)

    def _topics(self) -> set[str]:
        if self._subscriptions.assigned is not None:
            return {q.topic for q in self._subscriptions.assigned}
        return set(self._subscriptions.expressions)

    def _expression(self, topic: str) -> str:
        return self._subscriptions.expressions.get(topic, "*")

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(
            self.group,
            consume_type=ConsumeType.CONSUME_ACTIVELY,
            message_model=self.message_model,
            consume_from_where=self.consume_from_where,
            subscription_data_set=[build_subscription(t, self._expression(t)) for t in sorted(self._topics())],
        )

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of `topic`, sorted."""
        instance, _, _ = self._running()
        return subscribe_queues(topic, await instance.route(topic, refresh=True))

    async def _register_with_brokers(self) -> None:
        """Learn the brokers of the subscribed topics and tell them this member exists."""
        instance, _, _ = self._running()
        for topic in self._topics():
            try:
                await instance.route(topic)
            except RocketMQError as exc:
                log.warning("route of %s: %s", topic, exc)
        await instance.heartbeat()

    async def _rebalance(self) -> None:
        async with self._rebalance_lock:
            await self._rebalance_now()

    async def _rebalance_now(self) -> None:
        instance, store, _ = self._running()
        if self._subscriptions.assigned is not None:
            target = set(self._subscriptions.assigned)
        else:
            await self._register_with_brokers()
            rebalancer = Rebalancer(instance, self.group, self.strategy, self.message_model)
            target = set()
            for topic in sorted(self._subscriptions.expressions):
                queues = await rebalancer.assignment(topic)
                if queues is None:  # membership unknown yet: keep what this topic had
                    target.update(q for q in self._queues if q.topic == topic)
                else:
                    target.update(queues)
        for queue in [q for q in self._queues if q not in target]:
            log.info("group %s gives up %s", self.group, queue)
            state = self._queues.pop(queue)
            await self._stop_pulling(state)
            store.update_offset(queue, state.consumed_offset)
            if self.auto_commit:
                await store.persist_all([queue])
            store.remove_offset(queue)
        for queue in sorted(target - self._queues.keys()):
            try:
                start = await compute_start_offset(
                    instance, store, queue, self.consume_from_where, self.consume_timestamp_ms
                )
            except RocketMQError as exc:
                log.warning("cannot start reading %s yet: %s", queue, exc)
                continue
            log.info("group %s reads %s from offset %d", self.group, queue, start)
            state = _QueueState(queue, start, start)
            self._queues[queue] = state
            self._start_pulling(state)

    # -- pulling -------------------------------------------------------------------------------

    def _start_pulling(self, state: _QueueState) -> None:
        state.task = asyncio.get_running_loop().create_task(self._pull_loop(state), name=f"pull {state.queue}")

    async def _stop_pulling(self, state: _QueueState) -> None:
        task, state.task = state.task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _pull_loop(self, state: _QueueState) -> None:
        _, _, puller = self._running()
        queue = state.queue
        expression = self._expression(queue.topic)
        max_bytes = self.pull_threshold_size_for_queue * 1024 * 1024
        while True:
            if state.cached >= self.pull_threshold_for_queue or state.cached_bytes >= max_bytes:
                await asyncio.sleep(0.05)  # flow control: wait for poll() to take what is buffered
                continue
            version, offset = state.version, state.next_offset
            wanted = state.one_by_one.pull_size(offset, self.pull_batch_size)
            try:
                pulled, payload, count = await self._pull_once(puller, queue, offset, expression, wanted)
            except DecodeError as exc:
                if version == state.version and state.one_by_one.skips(queue, offset, wanted, exc):
                    self._skip(state, offset)
                continue
            except Exception as exc:
                if queue not in self._failing:
                    retrying = f"(retrying every {self.pull_delay_on_error_s:.1f} s)"
                    if isinstance(exc, RocketMQError):
                        log.warning("pulling %s failed %s: %s", queue, retrying, exc)
                    else:
                        log.exception("pulling %s failed unexpectedly %s", queue, retrying)
                    self._failing.add(queue)
                await asyncio.sleep(self.pull_delay_on_error_s)
                continue
            self._failing.discard(queue)
            if version != state.version:
                continue  # a seek moved the queue while this pull was under way
            if pulled.status is PullStatus.OFFSET_ILLEGAL:
                log.warning(
                    "offset %d of %s is no longer valid (queue holds %d..%d); continuing at %d",
                    offset,
                    queue,
                    pulled.min_offset,
                    pulled.max_offset,
                    pulled.next_begin_offset,
                )
                if state.consumed_offset == offset:
                    state.consumed_offset = pulled.next_begin_offset
            if count:
                size = _body_bytes(payload)
                state.cached += count
                state.cached_bytes += size
                await self._buffer.put(_Pulled(state, version, count, size, pulled.next_begin_offset, payload))
            elif state.cached == 0 and state.consumed_offset == offset:
                state.consumed_offset = pulled.next_begin_offset  # filtered-out messages count as consumed
            state.next_offset = pulled.next_begin_offset

    @staticmethod
    def _skip(state: _QueueState, offset: int) -> None:
        """Go on past the message at `offset`, which cannot be decoded; it counts as consumed."""
        state.next_offset = offset + 1
        if state.cached == 0 and state.consumed_offset == offset:
            state.consumed_offset = offset + 1

    async def _pull_once(
        self, puller: QueuePuller, queue: MessageQueue, offset: int, expression: str, max_messages: int
    ) -> tuple[Pulled, list[MessageExt] | list[pa.RecordBatch], int]:
        """One pull of up to `max_messages`: (its result, what it brought, how many messages)."""
        if self.arrow:
            batch_result = await puller.pull_batch(
                queue,
                offset,
                max_messages=max_messages,
                expression=expression,
                suspend_ms=self.broker_suspend_max_time_ms,
            )
            return batch_result, batch_result.batches, batch_result.num_rows
        result = await puller.pull_messages(
            queue,
            offset,
            max_messages=max_messages,
            expression=expression,
            suspend_ms=self.broker_suspend_max_time_ms,
        )
        return result, result.messages, len(result.messages)

    # -- polling and offsets -------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 5_000) -> Polled:
        """What the background pulls buffered: messages, or (in Arrow mode) record batches, each of one
        queue (a pull brings the batches the broker answered with: see docs/client.md, "Arrow batches").

        Waits up to `timeout_ms` for the first result; an empty list means nothing arrived.
        """
        _, store, _ = self._running()
        try:
            first = await asyncio.wait_for(self._buffer.get(), timeout_ms / 1000)
        except TimeoutError:
            return []
        taken = [first]
        while not self._buffer.empty():
            taken.append(self._buffer.get_nowait())
        messages: list[MessageExt] = []
        batches: list[pa.RecordBatch] = []
        for item in taken:
            state = item.state
            state.cached = max(0, state.cached - item.count)
            state.cached_bytes = max(0, state.cached_bytes - item.size)
            if item.version != state.version or self._queues.get(state.queue) is not state:
                continue
            state.consumed_offset = max(state.consumed_offset, item.next_offset)
            if self.auto_commit:
                store.update_offset(state.queue, state.consumed_offset)
            if self.arrow:
                batches += [batch for batch in item.payload if isinstance(batch, pa.RecordBatch)]
            else:
                messages += [message for message in item.payload if isinstance(message, MessageExt)]
        return batches if self.arrow else messages

    async def _state(self, queue: MessageQueue) -> _QueueState:
        if queue not in self._queues and queue in (self._subscriptions.assigned or ()):
            await self._rebalance()  # assign() was called and its queues are not set up yet
        state = self._queues.get(queue)
        if state is None:
            raise ValidationError(f"{queue} is not assigned to this consumer (assigned: {sorted(self._queues)})")
        return state

    async def seek(self, queue: MessageQueue, offset: int) -> None:
        """Read `queue` from `offset` next (it must lie within the queue's min and max offsets)."""
        instance, store, _ = self._running()
        state = await self._state(queue)
        address = await instance.broker_address(queue.broker_name, queue.topic)
        low = await offset_api.get_min_offset(instance.remoting, address, queue.topic, queue.queue_id)
        high = await offset_api.get_max_offset(instance.remoting, address, queue.topic, queue.queue_id)
        if not low <= offset <= high:
            raise ValidationError(f"cannot seek {queue} to {offset}: it holds offsets {low}..{high}")
        await self._move(state, offset, store)

    async def _move(self, state: _QueueState, offset: int, store: OffsetStore) -> None:
        """Read the queue from `offset` next; what was buffered of it is dropped."""
        await self._stop_pulling(state)
        state.version += 1
        state.next_offset = state.consumed_offset = offset
        store.update_offset(state.queue, offset, increase_only=False)
        self._start_pulling(state)

    def _reset_notice(self, topic: str, offsets: Mapping[MessageQueue, int]) -> None:
        """A broker's RESET_CONSUMER_CLIENT_OFFSET (the client instance's hook): reset in the background."""
        task = asyncio.get_running_loop().create_task(self._reset(topic, offsets), name=f"lite pull reset {topic}")
        self._reset_tasks.add(task)
        task.add_done_callback(self._reset_tasks.discard)

    async def _reset(self, topic: str, offsets: Mapping[MessageQueue, int]) -> None:
        async with self._rebalance_lock:
            if self._lifecycle.state is not ServiceState.RUNNING:
                return
            _, store, _ = self._running()
            states = [s for q, s in self._queues.items() if q.topic == topic and q in offsets]
            for state in states:
                log.info("group %s resets %s to %d", self.group, state.queue, offsets[state.queue])
                await self._move(state, offsets[state.queue], store)
            if states and self.auto_commit:
                await store.persist_all(set(self._queues))

    async def seek_to_begin(self, queue: MessageQueue) -> None:
        instance, _, _ = self._running()
        address = await instance.broker_address(queue.broker_name, queue.topic)
        await self.seek(queue, await offset_api.get_min_offset(instance.remoting, address, queue.topic, queue.queue_id))

    async def seek_to_end(self, queue: MessageQueue) -> None:
        instance, _, _ = self._running()
        address = await instance.broker_address(queue.broker_name, queue.topic)
        await self.seek(queue, await offset_api.get_max_offset(instance.remoting, address, queue.topic, queue.queue_id))

    async def offset_for_timestamp(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of `queue` stored at or after `timestamp_ms` (max offset when none is), on any broker."""
        instance, _, _ = self._running()
        address = await instance.broker_address(queue.broker_name, queue.topic)
        return await offset_for_time(instance.remoting, address, self.group, queue.topic, queue.queue_id, timestamp_ms)

    async def committed(self, queue: MessageQueue) -> int:
        """The group's committed offset of `queue` in its store; -1 when there is none."""
        _, store, _ = self._running()
        return await store.committed(queue)

    async def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Commit `offsets` (next offsets to consume), or what poll() has handed out so far."""
        _, store, _ = self._running()
        if offsets is None:
            offsets = {q: s.consumed_offset for q, s in self._queues.items()}
        for queue, offset in offsets.items():
            store.update_offset(queue, offset, increase_only=False)
        await store.persist_all(set(self._queues) | set(offsets))

    async def _auto_commit(self) -> None:
        _, store, _ = self._running()
        await store.persist_all(set(self._queues))
