"""The transactional sink's producers (per process: one for tasks, one for the driver) and the
driver's answers to checks.

The driver answers the brokers' checks, never an executor: the driver's Python workers (those that
plan a write and commit its batches) hold a producer of the sink's group (`producerGroup`), and the
tasks' half messages name that group (PGROUP), while the executors' producers are of another group
(`<producerGroup>-tasks`) and only send: a broker asks a producer of the half message's group. So
only the driver reads the batch records (:mod:`rocketspark.spark.sink.transactional.record`): the
transaction log needs no storage the executors share. A driver producer that cannot read the
record (a damaged file, permissions) answers UNKNOWN, so the broker asks again. A check of a batch
whose commit its driver left unfinished makes the checked producer finish it (finishing.py).

As the plain sink's (:mod:`rocketspark.spark.sink.writing`), the producer is kept per name servers,
group, credentials and TLS settings, every query's sends and ENDs carry the query's `sendTimeoutMs`,
and it is closed once no task or commit used it for `cluster.PRODUCER_IDLE_S`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from rocketspark.client.config import ClientConfig
from rocketspark.client.producer.transaction import AsyncTransactionProducer, TransactionStatus
from rocketspark.errors import RocketMQError, TransactionRecordError
from rocketspark.message.message import Message, MessageExt
from rocketspark.spark import cluster
from rocketspark.spark.process_cache import ProcessCache
from rocketspark.spark.sink.options import DEFAULT_SEND_TIMEOUT_MS, SinkOptions
from rocketspark.spark.sink.transactional.finishing import finish_orphan
from rocketspark.spark.sink.transactional.record import (
    ATTEMPT_PROPERTY,
    RECORD_PROPERTY,
    BatchRecord,
    RecordState,
    load,
)
from rocketspark.spark.sink.transactional.storage import records_of
from rocketspark.spark.sink.writing import producer_key

log = logging.getLogger(__name__)

#: the client instance of transactional producers: apart from the non-transactional sink's, which may
#: use the same producer group in the same process
INSTANCE_NAME = "rocketspark-transactions"

#: records a listener keeps read (a running query's checks are about its last few batches)
_CACHED_RECORDS = 16
#: the executors' producer group: `producerGroup` and this (a broker never asks it about a half message)
TASK_GROUP_SUFFIX = "-tasks"

_producers: ProcessCache[tuple[object, ...], AsyncTransactionProducer] = ProcessCache(
    alive=lambda producer: producer.running, close=cluster.close_producer, idle_s=cluster.PRODUCER_IDLE_S
)


class _TaskListener:
    """The executors' producers send for the driver's group: no check is about their own."""

    def execute_local_transaction(self, message: Message, arg: Any) -> TransactionStatus:
        return TransactionStatus.UNKNOWN

    def check_local_transaction(self, message: MessageExt) -> TransactionStatus:
        log.warning("half message %s: a check reached a task's producer, which has no answer", message.msg_id)
        return TransactionStatus.UNKNOWN


class RecordListener:
    """Answers checks from the batch records; the sink never runs local transactions through it.

    A broker asks about every half message of a batch it has not seen ended, so one record answers
    thousands of checks: it is read again only when its file changed (checks run on the producer's
    check threads).
    """

    def __init__(self) -> None:
        self._cached: dict[str, tuple[tuple[int, int], BatchRecord]] = {}
        self._cache_lock = threading.Lock()
        #: the producer whose checks this answers: it finishes a commit whose driver is gone
        self.producer: AsyncTransactionProducer | None = None

    def _record(self, path: str) -> BatchRecord | None:
        version = records_of(path).version(path)
        if version is None:
            return None
        with self._cache_lock:
            cached = self._cached.get(path)
        if cached is not None and cached[0] == version:
            return cached[1]
        record = load(path)
        if record is not None:
            with self._cache_lock:
                self._cached[path] = (version, record)
                if len(self._cached) > _CACHED_RECORDS:  # the oldest first: dicts keep insertion order
                    del self._cached[next(iter(self._cached))]
        return record

    def execute_local_transaction(self, message: Message, arg: Any) -> TransactionStatus:
        return TransactionStatus.UNKNOWN

    def check_local_transaction(self, message: MessageExt) -> TransactionStatus:
        path, attempt = message.properties.get(RECORD_PROPERTY), message.properties.get(ATTEMPT_PROPERTY)
        if not path or not attempt:
            log.warning("half message %s was not sent by the transactional sink: state unknown", message.msg_id)
            return TransactionStatus.UNKNOWN
        try:
            record = self._record(path)
        except (OSError, TransactionRecordError) as exc:
            log.warning("check of half message %s: state unknown, %s", message.msg_id, exc)
            return TransactionStatus.UNKNOWN
        answer = TransactionStatus.UNKNOWN if record is None else record.answer(attempt)
        if record is not None and record.state is RecordState.COMMITTING and answer is TransactionStatus.UNKNOWN:
            answer = self._finish_orphan(path)
        log.debug("check of half message %s (attempt %s of %s): %s", message.msg_id, attempt, path, answer.name)
        return answer

    def _finish_orphan(self, path: str) -> TransactionStatus:
        """ROLLBACK once this process finished the commit of the record at `path` (its rows are in
        their queues: the half message asked about, if not ended by that, is a copy), else UNKNOWN."""
        if self.producer is None:
            return TransactionStatus.UNKNOWN
        try:
            finished = finish_orphan(self.producer, path)
        except (RocketMQError, OSError, TimeoutError) as exc:
            log.warning("finishing the commit of %s from a check failed (the next check tries again): %s", path, exc)
            return TransactionStatus.UNKNOWN
        return TransactionStatus.ROLLBACK if finished else TransactionStatus.UNKNOWN


def _start(options: SinkOptions, *, tasks: bool) -> AsyncTransactionProducer:
    config = ClientConfig(namesrv_addr=options.namesrv_addr, instance_name=INSTANCE_NAME)
    listener = _TaskListener() if tasks else RecordListener()
    group = options.producer_group + TASK_GROUP_SUFFIX if tasks else options.producer_group
    producer = AsyncTransactionProducer(
        group,
        listener,
        check_group=options.producer_group,
        client_config=config,
        send_timeout_ms=DEFAULT_SEND_TIMEOUT_MS,
        retry_times_when_send_failed=0,
        credentials=options.credentials,
        use_tls=options.use_tls,
        tls_trust=options.tls_trust,
    )
    if isinstance(listener, RecordListener):
        listener.producer = producer
    cluster.run(producer.start())
    return producer


def _key(options: SinkOptions, tasks: bool) -> tuple[object, ...]:
    return (*producer_key(options), tasks)


def producer_for(options: SinkOptions) -> AsyncTransactionProducer:
    """This process's driver producer for the sink's name servers, group and security settings: it
    answers the brokers' checks of the group's half messages from the records.

    A half message is sent once (no retry inside a task: one that timed out may be stored, and only
    a new task attempt, whose half messages the record tells apart, may send its row again). Its
    own `send_timeout_ms` is the option's default, which a check that finishes an orphaned commit
    uses; the sink passes its query's `sendTimeoutMs` with each send and END."""
    return _producers.get(_key(options, False), lambda: _start(options, tasks=False))


def using_producer(options: SinkOptions) -> contextlib.AbstractContextManager[AsyncTransactionProducer]:
    """:func:`producer_for`, kept from closing while the block runs (a commit)."""
    return _producers.using(_key(options, False), lambda: _start(options, tasks=False))


def using_task_producer(options: SinkOptions) -> contextlib.AbstractContextManager[AsyncTransactionProducer]:
    """This process's producer for a task's half messages (of the driver's group, sent from
    `<producerGroup>-tasks`), kept from closing while the task sends."""
    return _producers.using(_key(options, True), lambda: _start(options, tasks=True))
