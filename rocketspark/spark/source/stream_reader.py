"""`RocketMQStreamReader`: micro-batches over the queues of the subscribed topics.

Offsets live in Spark's checkpoint. The consumer group's offsets on the brokers mirror the query's
progress (`rocketspark.spark.source.offset_mirror`: next offset to consume, increase-only as the offset
stores): the offsets a new query starts from, and the end of every batch once the next one is
planned (Spark asks for the next batch only when the previous one is done); planning itself only
reads. Spark's `commit(end)` is not used: it reports, one batch late, the same offsets the planning
step just before it mirrored. A mirror a broker did not take is tried again at the next one; the
last one of a `Trigger.AvailableNow` run is retried until it is taken or `pullTimeoutMs` passes. A
queue that started over (its topic created again) is the one exception to increase-only: the group
follows it back to where the query reads it from.

What the next batch takes is decided by `rocketspark.spark.source.planning`. A queue the query sees for the
first time after it started gets its position from the starting option as of the query's start: a
queue of a broker that was away then is not replayed from its earliest offset under `latest`, while a
queue created since (scale-out) holds only messages stored after the start and so is read from its
earliest offset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from rocketspark.errors import RocketMQError
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.options import Position, SourceOptions
from rocketspark.spark.source import offsets as offset_dicts
from rocketspark.spark.source.offset_mirror import OffsetMirror
from rocketspark.spark.source.planning import BatchRules, Observed, observe, plan_batch, plan_partitions
from rocketspark.spark.source.positions import require_named_queues, resolve
from rocketspark.spark.source.queue_view import QueueView
from rocketspark.spark.source.reading import read_partition
from rocketspark.spark.source.trigger_limits import TriggerClock, limit_bytes

log = logging.getLogger(__name__)

#: pause between two looks at the cluster while waiting for a broker or a mirror
WAIT_STEP_S = 1.0
#: an idle stream (its last plan found nothing to read) asks the brokers at most this often. Spark
#: plans again 10 ms after an empty one under the default trigger (spark.sql.streaming.pollingDelay):
#: a stream with nothing to read then kept 31 % of a core busy across Spark, Python and the servers
IDLE_POLL_INTERVAL_S = 0.1


class RocketMQStreamReader(DataSourceStreamReader):
    """The stream reader of every PySpark: PySpark 4.0 and 4.1 call this `latestOffset()`, with
    no argument; 4.2 and newer get `rocketspark.spark.source.admission`'s subclass, which Spark
    hands the start and the read limit (see `rocketspark.spark.versions`)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._initial: offset_dicts.OffsetDict | None = None
        #: the end of the last batch this run planned or Spark asked partitions for: the next
        #: batch's start where Spark does not pass it (PySpark 4.0 and 4.1)
        self._known_end: dict[str, Any] | None = None
        self._started_at_ms: int | None = None  # when this run of the query started
        self._target: dict[MessageQueue, int] | None = None  # Trigger.AvailableNow's end
        self._latest: offset_dicts.OffsetDict | None = None
        self._mirror = OffsetMirror(options, self._group())
        self._clock: TriggerClock | None = None  # minMessagesPerTrigger's, see trigger_limits
        self._idle_since: float | None = None  # time.monotonic() of the last plan, when it found nothing

    # -- driver ----------------------------------------------------------------------------------

    def _group(self) -> str:
        assert self.options.consumer_group is not None  # required for streams
        return self.options.consumer_group

    def _started(self) -> int:
        """When this run started, in ms: a new query's start, or a restarted one's first planning.

        (Spark keeps no source metadata of a Python source in the checkpoint, so a restarted query
        measures "as of the start" from its restart.)"""
        if self._started_at_ms is None:
            self._started_at_ms = int(time.time() * 1000)
        return self._started_at_ms

    def _queues(self, view: QueueView, *, must_exist: bool) -> list[MessageQueue]:
        """The queues to read now."""
        return view.queues(must_exist=must_exist)

    def initialOffset(self) -> dict[str, Any]:
        """Resolved once per query run and cached: Spark asks more than once. Queues whose broker does
        not answer now are left out and placed when first seen, as of this start."""
        if self._initial is None:
            self._started()
            view = QueueView(self.options)
            queues = self._queues(view, must_exist=True)
            require_named_queues(self.options.starting, queues, "startingOffsetsByTimestamp")
            start = resolve(view, queues, self.options.starting, self._group(), strict=True)
            if self.options.starting.position is Position.GROUP:
                self._mirror.assume(start)
            else:  # a new checkpoint moves the group to where the query starts, backwards too
                self._mirror.mirror(start, skip=view.silent_brokers)
            self._initial = offset_dicts.to_dict(start)
            log.info("query of group %s starts at %s", self._group(), self._initial)
        return self._initial

    def latestOffset(self) -> dict[str, Any]:  # type: ignore[override]  # PySpark 4.0 and 4.1's signature
        """The end of the next micro-batch, with no read limit (PySpark 4.0 and 4.1 have none).
        These versions pass no start: it is the end this run planned last, or, after a restart,
        the end of the batch Spark asked `partitions` for before (of the last batch of the
        checkpoint, `partitions(end, end)` when it was committed), or for a new query its start."""
        start = self._known_end if self._known_end is not None else self.initialOffset()
        self._known_end = self.next_end(start, limited=False)
        return self._known_end

    def next_end(self, start: dict[Any, Any], *, limited: bool) -> dict[str, Any]:
        """The end of the next micro-batch; `limited`: the trigger limits apply (Spark passed a
        read limit other than ReadAllAvailable). `start` is where the previous one ended, and it has
        been processed: once the batch is planned (reading only), its offsets are mirrored to the
        group (but for queues that started over, which are mirrored to where they are read from).

        Queues that cannot be read now keep their offsets while the others go on; a
        Trigger.AvailableNow run that has nothing else left waits for them (`_wait_for_brokers`)."""
        self._started()
        if self._idle_since is not None:
            time.sleep(max(0.0, self._idle_since + IDLE_POLL_INTERVAL_S - time.monotonic()))
        begin = offset_dicts.from_dict(start)
        planning_since = time.monotonic()
        view = QueueView(self.options)
        observed = self._observe(view, begin)
        ends, restarted = self._plan(view, observed, limited)
        if self._target is not None and ends == begin and observed.waiting:  # the run would end unread
            view, observed = self._wait_for_brokers(begin, observed, planning_since)
            ends, more = self._plan(view, observed, limited)
            restarted.update(more)
        # offsets of queues gone (moved back), lost or read again from elsewhere are not the group's
        left_out = {*observed.moved_back, *observed.lost, *restarted}
        processed = {q: o for q, o in begin.items() if q not in left_out}
        self._mirror.forget([*observed.lost, *restarted])
        self._mirror.mirror({**processed, **restarted}, skip=view.silent_brokers)
        if self._target is not None and ends == begin:
            self._mirror.mirror_until_taken(processed)
        self._idle_since = planning_since if ends == begin else None
        if offset_dicts.START_KEY not in start and start == self._initial:  # batch 0's end
            return offset_dicts.with_start(offset_dicts.to_dict(ends), start)
        if ends == begin:
            return dict(start)  # the same JSON text: Spark runs no batch (a carried start stays)
        return offset_dicts.to_dict(ends)

    def _plan(
        self, view: QueueView, observed: Observed, limited: bool
    ) -> tuple[dict[MessageQueue, int], dict[MessageQueue, int]]:
        """The next batch's end offsets for what `observed` saw, and the queues that started over
        with where the plan restarts them: the AvailableNow target follows them there (and the
        caller's mirror moves the group's offset there, as for a lost queue that comes back,
        placed as first seen)."""
        self._latest = offset_dicts.to_dict(observed.latest)
        if self._target is not None:
            for queue, offset in observed.latest.items():  # queues first seen during the run: what they hold now
                self._target.setdefault(queue, offset)
        rules = BatchRules(
            fail_on_data_loss=self.options.fail_on_data_loss,
            place=lambda queues: resolve(
                view, queues, self.options.starting, self._group(), latest_as_of_ms=self._started()
            ),
            max_rows=self.options.trigger.max_messages if limited else None,
            target=self._target,
        )
        plan = plan_batch(view, observed, rules)
        if plan.restarted and self._target is not None:
            self._target.update({q: observed.latest[q] for q in plan.restarted})
        ends = plan.ends
        if limited:
            if self._target is None:
                ends = self._hold_for_min(observed, ends)
            if self.options.trigger.max_bytes is not None:
                ends = limit_bytes(observed.begin, ends, self.options.trigger.max_bytes, view.body_bytes)
        return ends, dict(plan.restarted)

    def _hold_for_min(self, observed: Observed, ends: dict[MessageQueue, int]) -> dict[MessageQueue, int]:
        """minMessagesPerTrigger with maxTriggerDelay: the queues read on keep their offsets while
        fewer new messages than the minimum wait and the delay has not passed since the clock last
        restarted (`TriggerClock`, Kafka's). (Not for Trigger.AvailableNow, whose run would end
        there: it reads all it found.)"""
        limits = self.options.trigger
        if limits.min_messages is None:
            return ends
        if self._clock is None:
            self._clock = TriggerClock(limits.min_messages, limits.max_delay_ms)
        moved_back = set(observed.moved_back)
        known = [q for q in observed.latest if q in observed.begin and q not in moved_back]
        available = sum(max(0, observed.latest[q] - observed.begin[q]) for q in known)
        now_ms = int(time.time() * 1000)
        if self._clock.delays(available, now_ms):
            log.info(
                "waiting for more messages: %d new, minMessagesPerTrigger=%d, at most %d ms more (maxTriggerDelay)",
                available,
                limits.min_messages,
                self._clock.last_batch_ms + limits.max_delay_ms - now_ms,
            )
            return {**ends, **{q: observed.begin[q] for q in known}}
        return ends

    def _observe(self, view: QueueView, begin: dict[MessageQueue, int]) -> Observed:
        live_before = view.live_brokers()  # before the routes: a broker registering meanwhile is not "live"
        return observe(view, begin, self._queues(view, must_exist=False), live_before=live_before)

    def _wait_for_brokers(
        self, begin: dict[MessageQueue, int], observed: Observed, since: float
    ) -> tuple[QueueView, Observed]:
        """Trigger.AvailableNow must not end as if complete with a broker's messages unread: wait for
        the brokers of the waiting queues for up to pullTimeoutMs (from the start of the planning
        step that found them waiting), then fail naming them. No question to a broker runs past it."""
        deadline = since + self.options.pull_timeout_ms / 1000
        while True:
            brokers = sorted({q.broker_name for q in observed.waiting})
            if time.monotonic() >= deadline:
                details = "; ".join(f"{q.describe()}: {why}" for q, why in sorted(observed.waiting.items()))
                raise RocketMQError(
                    f"Trigger.AvailableNow cannot read everything available: broker(s) {', '.join(brokers)} "
                    f"could not be reached for {self.options.pull_timeout_ms} ms (pullTimeoutMs), "
                    f"so these queues are unread: {details}"
                )
            log.warning("waiting for broker(s) %s before the AvailableNow run can go on", ", ".join(brokers))
            time.sleep(WAIT_STEP_S)
            view = QueueView(self.options, deadline=deadline)
            observed = self._observe(view, begin)
            if not observed.waiting:
                view.deadline = None  # the batch is planned with this view: its questions take their time
                return view, observed

    def partitions(self, start: dict[Any, Any], end: dict[Any, Any]) -> Sequence[InputPartition]:
        """Batch 0 reads from the start its end carries, not from `start`: when Spark runs batch 0
        again after a crash, `start` is this run's `initialOffset()`, resolved anew."""
        self._known_end = dict(end)
        begin = offset_dicts.start_of(end) or offset_dicts.from_dict(start)
        return plan_partitions(begin, offset_dicts.from_dict(end), self.options.partitions)

    # -- executors -------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)
