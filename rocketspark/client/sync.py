"""Blocking `Producer`, `LitePullConsumer` and `PushConsumer` for code without an event loop (scripts, notebooks,
Spark tasks). They run their asynchronous twins on one event-loop thread shared by the process,
so any number of threads may call them and one process keeps one set of connections."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from rocketspark.client.api.send import SendResult
from rocketspark.client.consumer.lite_pull import AsyncLitePullConsumer, Polled
from rocketspark.client.consumer.push.consumer import DROP_WAIT_S, POOL_SHUTDOWN_WAIT_S, AsyncPushConsumer
from rocketspark.client.consumer.push.listeners import ConcurrentListener, OrderlyListener
from rocketspark.client.consumer.push.process_queue import Backlog
from rocketspark.client.producer.producer import AsyncProducer
from rocketspark.message.message import Message
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.sync import EventLoopThread

T = TypeVar("T")

_lock = threading.Lock()
_shared: dict[str, EventLoopThread] = {}
#: extra time a blocking call waits beyond the deadlines the call itself enforces
GRACE_S = 10.0


def shared_loop() -> EventLoopThread:
    """The process's event-loop thread for blocking clients (created on first use)."""
    with _lock:
        loop = _shared.get("loop")
        if loop is None or loop.loop.is_closed():
            loop = _shared["loop"] = EventLoopThread("rocketspark-client")
        return loop


async def _call(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` on the loop thread, for synchronous methods that touch the loop's state."""
    return function(*args)


class _Blocking:
    def __init__(self) -> None:
        self._loop = shared_loop()

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None) -> T:
        return self._loop.run(coroutine, timeout_s)

    def start(self) -> None:
        raise NotImplementedError

    def shutdown(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()


class Producer(_Blocking):
    """Blocking producer; see :class:`~rocketspark.client.producer.producer.AsyncProducer` for the options."""

    def __init__(self, group: str, **options: Any) -> None:
        super().__init__()
        self.async_producer = AsyncProducer(group, **options)
        self._timeout_s = self.async_producer.send_timeout_ms / 1000 + GRACE_S

    def start(self) -> None:
        self._run(self.async_producer.start(), self._timeout_s)

    def shutdown(self) -> None:
        self._run(self.async_producer.shutdown(), self._timeout_s)

    def send(
        self, message: Message, *, queue: MessageQueue | None = None, sharding_key: str | None = None
    ) -> SendResult:
        return self._run(self.async_producer.send(message, queue=queue, sharding_key=sharding_key), self._timeout_s)

    def send_async(
        self, message: Message, *, queue: MessageQueue | None = None, sharding_key: str | None = None
    ) -> concurrent.futures.Future[SendResult]:
        """Start a send; the returned future holds its result."""
        coroutine = self.async_producer.send(message, queue=queue, sharding_key=sharding_key)
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop.loop)

    def send_oneway(
        self, message: Message, *, queue: MessageQueue | None = None, sharding_key: str | None = None
    ) -> None:
        self._run(self.async_producer.send_oneway(message, queue=queue, sharding_key=sharding_key), self._timeout_s)

    def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None) -> list[SendResult]:
        return self._run(self.async_producer.send_batch(messages, queue=queue), None)

    def send_arrow(
        self, data: Any, topic: str, *, queue: MessageQueue | None = None, delay_level: int = 0
    ) -> list[SendResult]:
        return self._run(self.async_producer.send_arrow(data, topic, queue=queue, delay_level=delay_level), None)

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self.async_producer.fetch_publish_queues(topic), self._timeout_s)


class LitePullConsumer(_Blocking):
    """Blocking lite-pull consumer; see :class:`~rocketspark.client.consumer.lite_pull.AsyncLitePullConsumer`."""

    def __init__(self, group: str, **options: Any) -> None:
        super().__init__()
        self.async_consumer = AsyncLitePullConsumer(group, **options)
        self._timeout_s = self.async_consumer.client_config.request_timeout_ms / 1000 + GRACE_S

    def start(self) -> None:
        self._run(self.async_consumer.start(), self._timeout_s)

    def shutdown(self) -> None:
        self._run(self.async_consumer.shutdown(), self._timeout_s * 2)

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Read `topic`; a bad topic or expression raises here (ValidationError)."""
        self._run(_call(self.async_consumer.subscribe, topic, expression), self._timeout_s)

    def assign(self, queues: list[MessageQueue]) -> None:
        """Read exactly these queues; mixing with subscribe() raises here (ValidationError)."""
        self._run(_call(self.async_consumer.assign, queues), self._timeout_s)

    def assignment(self) -> set[MessageQueue]:
        return self.async_consumer.assignment()

    def poll(self, timeout_ms: int = 5_000) -> Polled:
        return self._run(self.async_consumer.poll(timeout_ms), timeout_ms / 1000 + GRACE_S)

    def seek(self, queue: MessageQueue, offset: int) -> None:
        self._run(self.async_consumer.seek(queue, offset), self._timeout_s)

    def seek_to_begin(self, queue: MessageQueue) -> None:
        self._run(self.async_consumer.seek_to_begin(queue), self._timeout_s)

    def seek_to_end(self, queue: MessageQueue) -> None:
        self._run(self.async_consumer.seek_to_end(queue), self._timeout_s)

    def offset_for_timestamp(self, queue: MessageQueue, timestamp_ms: int) -> int:
        return self._run(self.async_consumer.offset_for_timestamp(queue, timestamp_ms), self._timeout_s)

    def committed(self, queue: MessageQueue) -> int:
        return self._run(self.async_consumer.committed(queue), self._timeout_s)

    def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        self._run(self.async_consumer.commit(offsets), self._timeout_s)

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        return self._run(self.async_consumer.fetch_queues(topic), self._timeout_s)


class PushConsumer(_Blocking):
    """Blocking push consumer; see :class:`~rocketspark.client.consumer.push.consumer.AsyncPushConsumer`.

    The listener runs on the consumer's own threads; `start()` returns at once and messages arrive
    until `shutdown()`.
    """

    def __init__(self, group: str, **options: Any) -> None:
        super().__init__()
        self.async_consumer = AsyncPushConsumer(group, **options)
        self._timeout_s = self.async_consumer.client_config.request_timeout_ms / 1000 + GRACE_S

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume `topic`; a bad topic or expression raises here (ValidationError)."""
        self._run(_call(self.async_consumer.subscribe, topic, expression), self._timeout_s)

    def register_listener(self, listener: ConcurrentListener | OrderlyListener, *, orderly: bool = False) -> None:
        self.async_consumer.register_listener(listener, orderly=orderly)

    def start(self) -> None:
        self._run(self.async_consumer.start(), self._timeout_s)

    def shutdown(self) -> None:
        self._run(self.async_consumer.shutdown(), self._timeout_s * 2 + DROP_WAIT_S + POOL_SHUTDOWN_WAIT_S)

    def assignment(self) -> set[MessageQueue]:
        return self._run(_call(self.async_consumer.assignment), self._timeout_s)

    def backlog(self) -> dict[MessageQueue, Backlog]:
        return self._run(_call(self.async_consumer.backlog), self._timeout_s)
