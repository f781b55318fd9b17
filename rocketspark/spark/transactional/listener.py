"""The transactional sink's producer (one per process and settings) and its answers to checks.

Every process of a query that sends or ends half messages (executors' Python workers, the driver's
commit runner) holds a producer of the sink's group; a broker's check may reach any of them, and
each answers from the batch's record (:mod:`rocketspark.spark.transactional.record`). A producer
that cannot read the record (a transaction log not shared with its host, a damaged file) answers
UNKNOWN, so the broker asks again, maybe another producer.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from rocketspark.client.config import ClientConfig
from rocketspark.client.transaction import AsyncTransactionProducer, TransactionStatus
from rocketspark.errors import TransactionRecordError
from rocketspark.message.message import Message, MessageExt
from rocketspark.spark import cluster
from rocketspark.spark.process_cache import ProcessCache
from rocketspark.spark.sink_options import SinkOptions
from rocketspark.spark.transactional.record import ATTEMPT_PROPERTY, RECORD_PROPERTY, BatchRecord, load

log = logging.getLogger(__name__)

#: the client instance of transactional producers: apart from the non-transactional sink's, which may
#: use the same producer group in the same process
INSTANCE_NAME = "rocketspark-transactions"

#: records a listener keeps read (a running query's checks are about its last few batches)
_CACHED_RECORDS = 16

_producers: ProcessCache[tuple[object, ...], AsyncTransactionProducer] = ProcessCache(
    alive=lambda producer: producer.running
)


class RecordListener:
    """Answers checks from the batch records; the sink never runs local transactions through it.

    A broker asks about every half message of a batch it has not seen ended, so one record answers
    thousands of checks: it is read again only when its file changed (checks run on the producer's
    check threads, and a record of 50,000 rows took longer to read than to end its rows).
    """

    def __init__(self) -> None:
        self._cached: dict[str, tuple[tuple[int, int], BatchRecord]] = {}
        self._cache_lock = threading.Lock()

    def _record(self, path: str) -> BatchRecord | None:
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return None
        version = (stat.st_mtime_ns, stat.st_size)
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
        log.debug("check of half message %s (attempt %s of %s): %s", message.msg_id, attempt, path, answer.name)
        return answer


def producer_for(options: SinkOptions) -> AsyncTransactionProducer:
    """This process's transaction producer for the sink's name servers, group and security settings.

    A half message is sent once (no retry inside a task: one that timed out may be stored, and only
    a new task attempt, whose half messages the record tells apart, may send its row again)."""
    key = (options.namesrv_addr, options.producer_group, options.send_timeout_ms, *_network(options))

    def start() -> AsyncTransactionProducer:
        config = ClientConfig(namesrv_addr=options.namesrv_addr, instance_name=INSTANCE_NAME)
        producer = AsyncTransactionProducer(
            options.producer_group,
            RecordListener(),
            client_config=config,
            send_timeout_ms=options.send_timeout_ms,
            retry_times_when_send_failed=0,
            credentials=options.credentials,
            use_tls=options.use_tls,
            tls_trust=options.tls_trust,
        )
        cluster.run(producer.start())
        return producer

    return _producers.get(key, start)


def _network(options: SinkOptions) -> tuple[object, ...]:
    return (options.credentials, options.use_tls, options.tls_trust)
