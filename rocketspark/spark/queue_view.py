"""What the driver asks RocketMQ about the queues a source reads: their offsets and the group's.

Every question to a broker is retried with backoff when it fails in a way that can pass (a broker
restarting, a connection refused, a timeout), refreshing the topic's route in between so a broker
that came back on another address is found; name-server questions fail over along the name-server
list. A queue whose broker still cannot be reached after the retries is reported in `unreachable`
instead of failing the whole question: the caller decides whether to wait for it (a stream) or to
fail (a batch read).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TypeVar

from rocketspark.client.api import offset as offset_api
from rocketspark.client.api.common import call
from rocketspark.client.routes import subscribe_queues
from rocketspark.errors import (
    ConfigError,
    RemotingTimeoutError,
    RequestCodeNotSupportedError,
    ResponseError,
    RocketMQError,
    TopicNotExistError,
)
from rocketspark.message.validation import is_system_topic
from rocketspark.protocol.body.route import ClusterInfo
from rocketspark.protocol.body.topic import TopicList
from rocketspark.protocol.codes import RequestCode, ResponseCode, code_name
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.extension import ExtensionCode
from rocketspark.protocol.headers.queue_bytes import QueueBodyBytesRequestHeader, QueueBodyBytesResponseHeader
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark import cluster
from rocketspark.spark.options import SourceOptions

log = logging.getLogger(__name__)

T = TypeVar("T")

#: pauses between the attempts of one question to a broker, taken while the question has been
#: failing for less than RETRY_WINDOW_S (then the queue counts as unreachable)
RETRY_BACKOFF_S = (0.2, 0.5, 1.0)
RETRY_WINDOW_S = 5.0


class QueueView:
    """The queues a source reads and their offsets, as the brokers see them now.

    One view serves one planning step; `unreachable` collects the queues whose broker did not
    answer, with the reason, across the questions asked through this view. A broker that did not
    answer one question is not asked the view's later ones: each would wait out the retries again
    (seconds per question when a broker hangs), and the step's answer would be the same.
    """

    def __init__(self, options: SourceOptions, *, deadline: float | None = None) -> None:
        self.options = options
        #: time.monotonic() by which every question to a broker must be answered or given up on (a
        #: wait bounded by pullTimeoutMs); None: each question has its own RETRY_WINDOW_S
        self.deadline = deadline
        self.client = cluster.source_instance(options)
        self.unreachable: dict[MessageQueue, str] = {}
        self._silent: dict[str, str] = {}  # broker name: why it did not answer

    # -- name servers ----------------------------------------------------------------------------

    async def _ask_namesrv(self, code: RequestCode) -> RemotingCommand:
        response = await self.client.namesrv.invoke(RemotingCommand.request(code))
        if response.code != ResponseCode.SUCCESS:
            raise ResponseError.for_code(response.code, response.remark, f"{code_name(code)} to the name servers")
        return response

    def topics(self) -> list[str]:
        """The topics to read: the named ones, or those the name servers list that match the pattern."""
        pattern = self.options.pattern()
        if pattern is None:
            return list(self.options.topics)

        async def matching() -> list[str]:
            body = (await self._ask_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body
            listed = TopicList.from_json(body).topic_list
            return sorted(t for t in listed if pattern.fullmatch(t) and not is_system_topic(t))

        return cluster.run(matching())

    def queues(self, *, must_exist: bool) -> list[MessageQueue]:
        """Every readable queue of the topics, sorted; an unknown topic is an error if `must_exist`."""
        topics = self.topics()

        async def resolve() -> list[MessageQueue]:
            found: list[MessageQueue] = []
            for topic in topics:
                route = await self.client.fetch_route(topic)
                if route is None:
                    if must_exist:
                        raise TopicNotExistError(
                            f"topic {topic} does not exist: the name server {self.client.namesrv.current} "
                            "has no route for it",
                            code=ResponseCode.TOPIC_NOT_EXIST,
                        )
                    continue
                found.extend(subscribe_queues(topic, route))
            return sorted(found)

        return cluster.run(resolve())

    def live_brokers(self) -> set[str]:
        """Names of the brokers registered with the name servers now, with a master."""
        body = cluster.run(self._ask_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)).body
        info = ClusterInfo.from_json(body)
        return {name for name, data in info.broker_addr_table.items() if data.master_address}

    # -- brokers ---------------------------------------------------------------------------------

    async def _ask_broker(self, queue: MessageQueue, ask: Callable[[str], Awaitable[T]]) -> T:
        """`ask(address)` of the queue's broker, retried with backoff while the failure can pass.

        A refused connection is tried again after each pause; a broker that does not answer at all
        (each attempt waits for the request timeout) gets fewer attempts within the window. With a
        view's `deadline`, no attempt runs past it."""
        attempt = 0
        give_up = time.monotonic() + RETRY_WINDOW_S
        if self.deadline is not None:
            give_up = min(give_up, self.deadline)
        while True:
            try:
                address = await self.client.broker_address(queue.broker_name, queue.topic)
                return await self._before_deadline(ask(address), queue)
            except RocketMQError as exc:
                if not exc.retriable or attempt == len(RETRY_BACKOFF_S) or time.monotonic() >= give_up:
                    raise
                pause = RETRY_BACKOFF_S[attempt]
                attempt += 1
                log.info("asking broker %s about %s failed (%s); again in %.1f s", queue.broker_name, queue, exc, pause)
            await asyncio.sleep(pause)
            try:
                await self.client.fetch_route(queue.topic)  # the broker may be back on another address
            except RocketMQError as exc:
                log.info("refreshing the route of %s failed: %s", queue.topic, exc)

    async def _before_deadline(self, question: Awaitable[T], queue: MessageQueue) -> T:
        """The question's answer; with the view's `deadline`, given up on at it."""
        left = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        try:
            return await asyncio.wait_for(question, left)
        except TimeoutError:
            raise RemotingTimeoutError(f"broker {queue.broker_name} did not answer for {queue} in time") from None

    def _gather(
        self, queues: Iterable[MessageQueue], ask: Callable[[str, MessageQueue], Awaitable[T]]
    ) -> dict[MessageQueue, T]:
        """The answers of the queues whose broker answered; the others go to `unreachable`."""
        ordered = []
        for queue in sorted(queues):
            if queue.broker_name in self._silent:
                self.unreachable.setdefault(queue, self._silent[queue.broker_name])
            elif queue not in self.unreachable:
                ordered.append(queue)

        async def one(queue: MessageQueue) -> T | RocketMQError:
            try:
                return await self._ask_broker(queue, lambda address: ask(address, queue))
            except RocketMQError as exc:
                if not exc.retriable:
                    raise
                return exc

        async def every() -> list[T | RocketMQError]:
            return await asyncio.gather(*(one(q) for q in ordered))

        answers: dict[MessageQueue, T] = {}
        for queue, answer in zip(ordered, cluster.run(every()), strict=True):
            if isinstance(answer, RocketMQError):
                log.warning("broker %s does not answer for %s: %s", queue.broker_name, queue, answer)
                self.unreachable[queue] = self._silent[queue.broker_name] = str(answer)
            else:
                answers[queue] = answer
        return answers

    def require_reachable(self, what: str) -> None:
        """Raise, naming every broker and queue, when a queue's broker did not answer."""
        if not self.unreachable:
            return
        brokers = sorted({q.broker_name for q in self.unreachable})
        details = "; ".join(f"{q.describe()}: {why}" for q, why in sorted(self.unreachable.items()))
        raise RocketMQError(f"cannot {what}: broker(s) {', '.join(brokers)} did not answer ({details})")

    def max_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        remoting = self.client.remoting
        return self._gather(queues, lambda a, q: offset_api.get_max_offset(remoting, a, q.topic, q.queue_id))

    def min_offsets(self, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        remoting = self.client.remoting
        return self._gather(queues, lambda a, q: offset_api.get_min_offset(remoting, a, q.topic, q.queue_id))

    def offsets_for_timestamp(self, queues: Iterable[MessageQueue], timestamp_ms: int) -> dict[MessageQueue, int]:
        """The first offset of each queue stored at or after `timestamp_ms`."""
        return self.offsets_for_timestamps(dict.fromkeys(queues, timestamp_ms))

    def offsets_for_timestamps(self, timestamps: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
        """The first offset of each queue stored at or after its own time (ms); the queue's max
        offset where no message is that new."""
        remoting = self.client.remoting
        return self._gather(
            timestamps, lambda a, q: offset_api.search_offset(remoting, a, q.topic, q.queue_id, timestamps[q])
        )

    def body_bytes(self, ranges: Mapping[MessageQueue, tuple[int, int, int]]) -> dict[MessageQueue, int]:
        """For each queue's (start, end, max_bytes): the first offset past the messages from start
        whose stored body sizes add up to at most max_bytes (at most end), asked with the bundled
        broker's QUEUE_BODY_BYTES extension, which sums the sizes its queue entries carry. A broker
        without it (Apache RocketMQ, or arrowEnable=false) cannot say: ConfigError naming it."""
        remoting = self.client.remoting

        async def ask(address: str, queue: MessageQueue) -> int:
            start, end, budget = ranges[queue]
            header = QueueBodyBytesRequestHeader(queue.topic, queue.queue_id, start, end, budget)
            response = await call(remoting, address, RemotingCommand.request(ExtensionCode.QUEUE_BODY_BYTES, header))
            return response.decode_header(QueueBodyBytesResponseHeader).end_offset

        try:
            return self._gather(ranges, ask)
        except RequestCodeNotSupportedError as exc:
            raise ConfigError(
                "option maxBytesPerTrigger needs brokers that sum stored body sizes (QUEUE_BODY_BYTES, 31003: "
                f"rocketspark's broker with arrowEnable=true); Apache RocketMQ brokers do not: {exc}"
            ) from None

    def group_offsets(self, group: str, queues: Iterable[MessageQueue]) -> dict[MessageQueue, int | None]:
        """The group's committed offsets; None where it has none (asked with setZeroIfNotFound=false)."""
        remoting = self.client.remoting

        def ask(address: str, queue: MessageQueue) -> Awaitable[int | None]:
            return offset_api.query_consumer_offset(
                remoting, address, group, queue.topic, queue.queue_id, set_zero_if_not_found=False
            )

        return self._gather(queues, ask)

    def commit_group_offsets(self, group: str, offsets: dict[MessageQueue, int]) -> set[MessageQueue]:
        """Mirror offsets into the group's consumer offsets; returns the queues whose broker took them.

        Failures are logged, never raised: the checkpoint, not the broker, is the source of truth,
        and the caller tries the others again later."""
        remoting = self.client.remoting

        async def update(queue: MessageQueue) -> bool:
            if queue.broker_name in self._silent:
                return False
            try:
                await self._ask_broker(
                    queue,
                    lambda address: offset_api.update_consumer_offset(
                        remoting, address, group, queue.topic, queue.queue_id, offsets[queue], oneway=False
                    ),
                )
            except RocketMQError as exc:
                log.warning("mirroring offset %d of %s to group %s failed: %s", offsets[queue], queue, group, exc)
                if exc.retriable:
                    self._silent[queue.broker_name] = str(exc)
                return False
            return True

        async def every() -> list[bool]:
            return await asyncio.gather(*(update(q) for q in sorted(offsets)))

        return {q for q, ok in zip(sorted(offsets), cluster.run(every()), strict=True) if ok}
