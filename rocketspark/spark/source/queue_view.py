"""What the driver asks RocketMQ about the queues a source reads: their offsets and the group's.

It only reads (the group's offsets are written by `rocketspark.spark.source.offset_mirror`), through the
process's `ClientInstance` and the client's RPCs (`rocketspark.client.api`). Every question to a
broker is asked with the client's retry policy (`rocketspark.client.retry.ask_broker`: again after
a backoff while it fails in a way that can pass, refreshing the topic's route in between so a broker
that came back on another address is found); name-server questions fail over along the name-server
list. A queue whose broker still cannot be reached after the retries is reported in `unreachable`
instead of failing the whole question: the caller decides whether to wait for it (a stream) or to
fail (a batch read).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TypeVar

from rocketspark.client.api import offset as offset_api
from rocketspark.client.consumer.time_offsets import offset_for_time
from rocketspark.client.retry import ask_broker
from rocketspark.client.routes import subscribe_queues
from rocketspark.errors import (
    ConfigError,
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
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark import cluster
from rocketspark.spark.options import SourceOptions
from rocketspark.spark.source.reading import DEFAULT_READER_GROUP

log = logging.getLogger(__name__)

T = TypeVar("T")


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
        #: wait bounded by pullTimeoutMs); None: each question has the retry policy's own window
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
                return await ask_broker(self.client, queue, lambda address: ask(address, queue), deadline=self.deadline)
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
        offset where no message is that new. Exact on any broker (`time_offsets.offset_for_time`
        reads store times as the source's group, as its pulls do)."""
        remoting = self.client.remoting
        group = self.options.consumer_group or DEFAULT_READER_GROUP

        def ask(address: str, queue: MessageQueue) -> Awaitable[int]:
            return offset_for_time(remoting, address, group, queue.topic, queue.queue_id, timestamps[queue])

        return self._gather(timestamps, ask)

    def body_bytes(self, ranges: Mapping[MessageQueue, tuple[int, int, int]]) -> dict[MessageQueue, int]:
        """For each queue's (start, end, max_bytes): the first offset past the messages from start
        whose stored body sizes add up to at most max_bytes (at most end), asked with the bundled
        broker's QUEUE_BODY_BYTES extension, which sums the sizes its queue entries carry. A broker
        without it (Apache RocketMQ, or arrowEnable=false) cannot say: ConfigError naming it."""
        remoting = self.client.remoting

        def ask(address: str, queue: MessageQueue) -> Awaitable[int]:
            start, end, budget = ranges[queue]
            return offset_api.body_bytes_end(remoting, address, queue.topic, queue.queue_id, start, end, budget)

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

    @property
    def silent_brokers(self) -> frozenset[str]:
        """The brokers that did not answer a question of this view."""
        return frozenset(self._silent)
