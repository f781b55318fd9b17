"""`AsyncProducer`: send messages one at a time, in batches, or as Arrow batches.

Queue selection follows Java's DefaultMQProducer: round robin over the topic's writable queues,
retrying failed sends on another broker (`retry_times_when_send_failed`), or a fixed queue, or a
queue chosen by sharding key exactly as Java's `SelectMessageQueueByHash` chooses it. A topic that
does not exist yet is sent to through the route of TBW102, so the broker creates it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketspark.client.api.send import SendResult, send_arrow, send_message, send_oneway
from rocketspark.client.config import ClientConfig, client_config_for
from rocketspark.client.instance import ClientInstance
from rocketspark.client.lifecycle import AsyncClient, Lifecycle, ServiceState
from rocketspark.client.producer.queue_selector import RoundRobinSelector, select_by_key
from rocketspark.client.producer.send_retry import NO_LIMITS, Limits, send_with_retries
from rocketspark.client.routes import publish_queues, with_queue_limit
from rocketspark.errors import (
    RequestCodeNotSupportedError,
    TopicNotExistError,
    ValidationError,
)
from rocketspark.message import sysflag
from rocketspark.message.batches.producer import producer_batch
from rocketspark.message.ids import UniqueIdGenerator
from rocketspark.message.message import Message
from rocketspark.message.properties import codec as props
from rocketspark.message.properties.columns import encode_properties_column
from rocketspark.message.records.batch_body import BatchColumns, encode_batch_body
from rocketspark.message.validation import (
    AUTO_CREATE_TOPIC_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
    validate_body,
    validate_send_topic,
)
from rocketspark.protocol.body.route import TopicRouteData
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.send import SendMessageRequestHeader
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.signing import SessionCredentials
from rocketspark.remoting.tls import TrustSetting

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
#: Arrow sends are cut into requests of about this many body bytes, well inside the 16 MiB frame
ARROW_REQUEST_BYTES = 8 * 1024 * 1024


class AsyncProducer(AsyncClient):
    def __init__(
        self,
        group: str,
        *,
        namesrv_addr: str | None = None,
        send_timeout_ms: int = 3_000,
        retry_times_when_send_failed: int = 2,
        compress_msg_body_over_bytes: int = 4_096,
        compress_level: int = 5,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        default_topic_queue_nums: int = 4,
        use_arrow: bool = True,
        hold_fixed_queues: bool = False,
        client_config: ClientConfig | None = None,
        credentials: SessionCredentials | None = None,
        use_tls: bool = False,
        tls_trust: TrustSetting = None,
    ) -> None:
        """`hold_fixed_queues`: a send to a fixed queue (explicit, or by sharding key) that fails
        with a connection error, a broker missing from the route or a retriable answer is tried
        again on that queue after a backoff until `send_timeout_ms`, instead of failing at once
        (Java's behaviour). The Spark sink sends so: a broker's duplicate window only catches a
        retried send that comes back to it.

        `credentials`: every request is signed with them (ACL 1.0), for brokers with ACL on.
        `use_tls`: every connection is TLS, certificates verified against `tls_trust` (a CA file,
        default the system's CAs; see :mod:`rocketspark.remoting.tls`)."""
        if retry_times_when_send_failed < 0 or send_timeout_ms <= 0 or max_message_size <= 0:
            raise ValidationError("send_timeout_ms and max_message_size must be positive, retries not negative")
        self.group = group
        self.client_config = client_config_for(client_config, namesrv_addr, credentials, use_tls, tls_trust)
        self.send_timeout_ms = send_timeout_ms
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.compress_msg_body_over_bytes = compress_msg_body_over_bytes
        self.compress_level = compress_level
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.use_arrow = use_arrow
        self.hold_fixed_queues = hold_fixed_queues
        self.instance: ClientInstance | None = None
        self._lifecycle = Lifecycle(f"producer {group}")
        self._selector = RoundRobinSelector()
        self._ids = UniqueIdGenerator(self.client_config.client_ip)
        self._standard_only: set[str] = set()  # brokers that answered the Arrow send "not supported"
        # topic -> (the route the queues were derived from, the queues)
        self._publish_cache: dict[str, tuple[TopicRouteData, list[MessageQueue]]] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._lifecycle.begin_start()
        try:
            instance = await ClientInstance.acquire(self.client_config)
            try:
                instance.register_producer(self.group)
            except BaseException:
                await instance.release()
                raise
        except BaseException:
            self._lifecycle.state = ServiceState.START_FAILED
            raise
        self.instance = instance
        self._lifecycle.state = ServiceState.RUNNING

    async def shutdown(self) -> None:
        if self._lifecycle.state is not ServiceState.RUNNING or self.instance is None:
            return
        self._lifecycle.state = ServiceState.SHUTDOWN_ALREADY
        await self.instance.unregister_producer(self.group)
        await self.instance.release()

    @property
    def running(self) -> bool:
        """Started, not shut down, and its client instance still running."""
        return (
            self._lifecycle.state is ServiceState.RUNNING
            and self.instance is not None
            and self.instance.state is ServiceState.RUNNING
        )

    def _running(self) -> ClientInstance:
        self._lifecycle.require_running()
        assert self.instance is not None
        return self.instance

    # -- routes --------------------------------------------------------------------------------

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a send to `topic` may go to; for an unknown topic, those TBW102 offers."""
        instance = self._running()
        cached = self._publish_cache.get(topic)
        if cached is not None:
            current = instance.routes.get(topic)
            template = instance.routes.get(AUTO_CREATE_TOPIC_KEY)
            if current is cached[0] or (current is None and template is cached[0]):
                return cached[1]
        instance.use_topic(self.group, topic)
        try:
            route = await instance.route(topic)
        except TopicNotExistError:
            try:
                template = await instance.route(AUTO_CREATE_TOPIC_KEY)
            except TopicNotExistError:
                raise TopicNotExistError(
                    f"topic {topic} does not exist and no broker creates topics automatically "
                    f"(name server {instance.namesrv.current}); create it first",
                    code=ResponseCode.TOPIC_NOT_EXIST,
                ) from None
            queues = publish_queues(topic, with_queue_limit(template, self.default_topic_queue_nums))
            route = template
        else:
            queues = publish_queues(topic, route)
        if not queues:
            raise TopicNotExistError(f"topic {topic} has no writable queue", code=ResponseCode.TOPIC_NOT_EXIST)
        self._publish_cache[topic] = (route, queues)
        return queues

    # -- single messages -----------------------------------------------------------------------

    def _header(
        self, message: Message, properties: dict[str, str], sys_flag: int, *, batch: bool = False
    ) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(
            producer_group=self.group,
            topic=message.topic,
            default_topic=AUTO_CREATE_TOPIC_KEY,
            default_topic_queue_nums=self.default_topic_queue_nums,
            queue_id=0,
            sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=message.flag,
            properties=props.encode_properties(properties),
            reconsume_times=0,
            unit_mode=False,
            batch=batch or None,
        )

    def _prepare(self, message: Message, uniq_key: str | None = None) -> tuple[SendMessageRequestHeader, bytes, str]:
        validate_send_topic(message.topic)
        validate_body(message.body, self.max_message_size)
        reserved = props.SYSTEM_KEYS & message.properties.keys()
        if reserved:
            timed = reserved & {props.TIMER_DELIVER_MS, props.TIMER_DELAY_SEC, props.TIMER_DELAY_MS}
            hint = " (a delivery time is Message(..., deliver_time_ms=...))" if timed else ""
            raise ValidationError(f"user properties may not use the system keys {sorted(reserved)}{hint}")
        if message.delay_level < 0:
            raise ValidationError(f"the delay level must be 0 (none) or positive, got {message.delay_level}")
        if message.delay_level and message.deliver_time_ms is not None:
            raise ValidationError("a message has a delay level or a delivery time (deliver_time_ms), not both")
        uniq_key = uniq_key or self._ids.next()
        properties = message.all_properties()
        properties[props.UNIQ_KEY] = uniq_key
        properties[props.WAIT_STORE_MSG_OK] = "true"
        body, sys_flag = message.body, 0
        if len(body) >= self.compress_msg_body_over_bytes:
            body = zlib.compress(body, self.compress_level)
            sys_flag |= sysflag.COMPRESSED
        return self._header(message, properties, sys_flag), body, uniq_key

    async def send(
        self,
        message: Message,
        *,
        queue: MessageQueue | None = None,
        sharding_key: str | None = None,
        timeout_ms: int | None = None,
        uniq_key: str | None = None,
        retries: int | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's acknowledgement; `uniq_key`: its id (UNIQ_KEY)
        when the caller chose one, else a new one. `timeout_ms` and `retries`: this send's, instead
        of the producer's `send_timeout_ms` and `retry_times_when_send_failed`."""
        header, body, uniq_key = self._prepare(message, uniq_key)

        async def attempt(instance: ClientInstance, target: MessageQueue, timeout_s: float) -> SendResult:
            header.queue_id = target.queue_id
            address = await instance.broker_address(target.broker_name, target.topic)
            return await send_message(
                instance.remoting, address, target.broker_name, header, body, msg_id=uniq_key, timeout_s=timeout_s
            )

        return await self._with_retries(message.topic, queue, sharding_key, Limits(timeout_ms, retries), attempt)

    def send_async(
        self, message: Message, *, queue: MessageQueue | None = None, sharding_key: str | None = None
    ) -> asyncio.Future[SendResult]:
        """Start a send; the future holds its result (or its error)."""
        return asyncio.ensure_future(self.send(message, queue=queue, sharding_key=sharding_key))

    async def send_oneway(
        self, message: Message, *, queue: MessageQueue | None = None, sharding_key: str | None = None
    ) -> None:
        """Send without waiting for (or getting) an acknowledgement."""
        instance = self._running()
        header, body, _ = self._prepare(message)
        target = await self._target(message.topic, queue, sharding_key, None)
        header.queue_id = target.queue_id
        address = await instance.broker_address(target.broker_name, target.topic)
        await send_oneway(instance.remoting, address, header, body)

    async def _target(
        self, topic: str, queue: MessageQueue | None, sharding_key: str | None, avoid_broker: str | None
    ) -> MessageQueue:
        if queue is not None:
            if queue.topic != topic:
                raise ValidationError(f"queue {queue} is not a queue of topic {topic}")
            return queue
        queues = await self.fetch_publish_queues(topic)
        if sharding_key is not None:
            return select_by_key(queues, sharding_key)
        return self._selector.select(queues, avoid_broker)

    async def _with_retries(
        self,
        topic: str,
        queue: MessageQueue | None,
        sharding_key: str | None,
        limits: Limits,
        attempt: Callable[[ClientInstance, MessageQueue, float], Awaitable[T]],
    ) -> T:
        """Run `attempt` on a chosen queue, with the retries of :mod:`~rocketspark.client.producer.send_retry`."""
        instance = self._running()
        retries = self.retry_times_when_send_failed if limits.retries is None else limits.retries
        return await send_with_retries(
            topic,
            lambda avoid: self._target(topic, queue, sharding_key, avoid),
            lambda target, remaining_s: attempt(instance, target, remaining_s),
            retries=retries,
            timeout_s=(limits.timeout_ms or self.send_timeout_ms) / 1000,
            fixed_queue=queue is not None or sharding_key is not None,
            hold_queue=self.hold_fixed_queues,
            refresh_route=lambda: instance.route(topic, refresh=True),
        )

    # -- batches -------------------------------------------------------------------------------

    async def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None) -> list[SendResult]:
        """Send messages of one topic in as few SEND_BATCH_MESSAGE requests as the size limit allows."""
        if not messages:
            return []
        topic = messages[0].topic
        entries: list[tuple[int, bytes, str]] = []
        ids: list[str] = []
        for message in messages:
            if message.topic != topic:
                raise ValidationError(f"a batch holds one topic; got {topic} and {message.topic}")
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or message.delay_level or message.deliver_time_ms is not None:
                raise ValidationError(
                    "batches may not hold retry-topic or delayed (delay_level, deliver_time_ms) messages; "
                    "send them one by one"
                )
            header, _, uniq_key = self._prepare(
                Message(topic, message.body, message.tags, message.keys, message.flag, message.properties)
            )
            entries.append((message.flag, message.body, header.properties or ""))  # batches are never compressed
            ids.append(uniq_key)
        return await self._send_columns(topic, BatchColumns.of(entries), ids, queue, NO_LIMITS)

    async def _send_columns(
        self, topic: str, batch: BatchColumns, ids: list[str], queue: MessageQueue | None, limits: Limits
    ) -> list[SendResult]:
        """The messages in as many SEND_BATCH_MESSAGE requests as the size limit calls for, one after another."""
        return [
            await self._send_entries(topic, batch.slice(start, end), ids[start:end], queue, limits)
            for start, end in _chunks(batch.sizes(), self.max_message_size)
        ]

    async def _send_entries(
        self, topic: str, entries: BatchColumns, ids: list[str], queue: MessageQueue | None, limits: Limits
    ) -> SendResult:
        body = encode_batch_body(entries)
        header = self._header(Message(topic, b""), {props.WAIT_STORE_MSG_OK: "true"}, 0, batch=True)

        async def attempt(instance: ClientInstance, target: MessageQueue, timeout_s: float) -> SendResult:
            header.queue_id = target.queue_id
            address = await instance.broker_address(target.broker_name, target.topic)
            return await send_message(
                instance.remoting,
                address,
                target.broker_name,
                header,
                body,
                msg_id=",".join(ids),
                code=RequestCode.SEND_BATCH_MESSAGE,
                count=len(entries),
                timeout_s=timeout_s,
            )

        return await self._with_retries(topic, queue, None, limits, attempt)

    # -- Arrow ---------------------------------------------------------------------------------

    async def send_arrow(
        self, data: Any, topic: str, *, queue: MessageQueue | None = None, delay_level: int = 0
    ) -> list[SendResult]:
        """Send a pyarrow Table/RecordBatch or pandas DataFrame (a `body` column, optional `tags`,
        `keys`, `uniq_key`, `properties`) with the Arrow send; brokers without it get standard batches.

        With a `delay_level`, the rows go one by one as delayed messages (brokers take no delayed
        message in a batch)."""
        return await self.send_producer_batch(producer_batch(data), topic, queue=queue, delay_level=delay_level)

    async def send_producer_batch(
        self,
        batch: pa.RecordBatch,
        topic: str,
        *,
        queue: MessageQueue | None = None,
        delay_level: int = 0,
        timeout_ms: int | None = None,
        retries: int | None = None,
    ) -> list[SendResult]:
        """:meth:`send_arrow` of a batch `producer_batch` made already (PRODUCER_SCHEMA), which it
        does not convert again (the Spark sink converts its rows once, in `sink_rows`). `timeout_ms`
        and `retries`: each request's, instead of the producer's (the Spark sink's, per query)."""
        limits = Limits(timeout_ms, retries)
        validate_send_topic(topic)
        if delay_level < 0:
            raise ValidationError(f"the delay level must be 0 (none) or positive, got {delay_level}")
        if batch.num_rows == 0:
            return []
        lengths = pc.binary_length(batch.column("body"))
        shortest, longest = (v.as_py() for v in pc.min_max(lengths).values())
        if shortest == 0 or longest > self.max_message_size:
            raise ValidationError(
                f"message bodies must be 1..{self.max_message_size:,} bytes; this batch has {shortest}..{longest}"
            )
        given = batch.column("uniq_key")
        if given.null_count:  # ids only for the rows without one (deterministic sink ids fill every row)
            uniq = pc.coalesce(given, self._ids.next_many(batch.num_rows))
            batch = batch.set_column(batch.schema.get_field_index("uniq_key"), "uniq_key", uniq)
        if delay_level:
            return await self._send_delayed_rows(topic, batch, queue, delay_level, limits)
        sizes = lengths.to_numpy(zero_copy_only=False)
        results = []
        for start, end in _chunks(sizes, ARROW_REQUEST_BYTES):
            results.extend(await self._send_arrow_chunk(topic, batch.slice(start, end - start), queue, limits))
        return results

    async def _send_delayed_rows(
        self, topic: str, batch: pa.RecordBatch, queue: MessageQueue | None, delay_level: int, limits: Limits
    ) -> list[SendResult]:
        columns = batch.to_pydict()
        rows = zip(*(columns[name] for name in ("body", "tags", "keys", "uniq_key", "properties")), strict=True)
        return [
            await self.send(
                Message(topic, body, tags, keys, properties=dict(properties or ()), delay_level=delay_level),
                queue=queue,
                uniq_key=uniq_key,
                timeout_ms=limits.timeout_ms,
                retries=limits.retries,
            )
            for body, tags, keys, uniq_key, properties in rows
        ]

    async def _send_arrow_chunk(
        self, topic: str, chunk: pa.RecordBatch, queue: MessageQueue | None, limits: Limits
    ) -> list[SendResult]:
        if not self.use_arrow or await self._standard_only_for(topic, queue):
            # not through an attempt that gives up: that would take a queue from the selector for nothing
            return await self._send_standard_rows(topic, chunk, queue, limits)
        header = self._header(Message(topic, b""), {}, 0)
        attempt = self._arrow_attempt(header, chunk, self._standard_only, self._learn_standard_only)
        result = await self._with_retries(topic, queue, None, limits, attempt)
        if result is not None:
            return [result]
        return await self._send_standard_rows(topic, chunk, queue, limits)

    def _learn_standard_only(self, broker_name: str) -> None:
        if broker_name not in self._standard_only:  # sends in flight at once learn it together
            log.info("broker %s does not serve the Arrow send; using standard batches with it", broker_name)
            self._standard_only.add(broker_name)

    def _arrow_attempt(
        self,
        header: SendMessageRequestHeader,
        batch: pa.RecordBatch,
        lacking: set[str],
        learn: Callable[[str], None],
        code: int = ExtensionCode.ARROW_SEND_MESSAGE,
    ) -> Callable[[ClientInstance, MessageQueue, float], Awaitable[SendResult | None]]:
        """An attempt (for `_with_retries`) at sending `batch` with `header` by the Arrow request
        `code` to the target queue; None from a broker in `lacking`, or one that answers it does not
        serve `code` (then given to `learn`)."""
        first_id = batch.column("uniq_key")[0].as_py()

        async def attempt(instance: ClientInstance, target: MessageQueue, timeout_s: float) -> SendResult | None:
            if target.broker_name in lacking:
                return None
            header.queue_id = target.queue_id
            address = await instance.broker_address(target.broker_name, target.topic)
            request = (instance.remoting, address, target.broker_name, header, batch)
            try:
                return await send_arrow(*request, first_msg_id=first_id, timeout_s=timeout_s, code=code)
            except RequestCodeNotSupportedError:
                learn(target.broker_name)
                return None

        return attempt

    async def _standard_only_for(self, topic: str, queue: MessageQueue | None) -> bool:
        """Whether every broker a send to `topic` (or to `queue`) may go to lacks the Arrow send."""
        if not self._standard_only:
            return False
        queues = [queue] if queue is not None else await self.fetch_publish_queues(topic)
        return all(q.broker_name in self._standard_only for q in queues)

    async def _send_standard_rows(
        self, topic: str, chunk: pa.RecordBatch, queue: MessageQueue | None, limits: Limits
    ) -> list[SendResult]:
        """The Arrow rows as standard batches (for brokers without the Arrow send), each sent, and
        retried, as any batch."""
        properties = encode_properties_column(
            chunk.column("properties"),
            tags=chunk.column("tags"),
            keys=chunk.column("keys"),
            uniq_key=chunk.column("uniq_key"),
        )
        # the same properties an Arrow send stores (WAIT absent means "wait", as for brokers)
        flags = np.zeros(chunk.num_rows, dtype=np.int32)
        batch = BatchColumns(flags, chunk.column("body"), properties)
        return await self._send_columns(topic, batch, chunk.column("uniq_key").to_pylist(), queue, limits)


def _chunks(sizes: Sequence[int] | np.ndarray, limit: int) -> list[tuple[int, int]]:
    """[start, end) ranges of consecutive items whose sizes add up to at most `limit` (at least one item each)."""
    totals = np.cumsum(np.asarray(sizes, dtype=np.int64))
    ranges = []
    start = 0
    while start < len(totals):
        before = int(totals[start - 1]) if start else 0
        end = max(start + 1, int(np.searchsorted(totals, before + limit, side="right")))
        ranges.append((start, end))
        start = end
    return ranges
