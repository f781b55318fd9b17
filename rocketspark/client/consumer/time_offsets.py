"""The offset of a time on any broker: the first message of a queue stored at or after it.

Brokers answer SEARCH_OFFSET_BY_TIMESTAMP differently: the bundled broker with the first offset
stored at or after the time, Apache RocketMQ 4.9 (and the bundled broker with flavor=apache) with
the entry nearest the time (`ConsumeQueue.getOffsetInQueueByTime`: one side or the other of it, any
of several messages stored in the same millisecond, the last message for a time past the newest).
`offset_for_time` takes the answer as a hint only and finds the true offset by reading store times
around it with standard pulls, so it is exact on every broker. It is the client's one rule for a
time (`LitePullConsumer.offset_for_timestamp`, CONSUME_FROM_TIMESTAMP) and the Spark source's
(`rocketspark.spark.source.queue_view.QueueView.offsets_for_timestamps`).
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Awaitable, Callable, Sequence

from rocketspark.client.api import offset as offset_api
from rocketspark.client.api.pull import PullStatus, read_pull
from rocketspark.errors import RocketMQError
from rocketspark.message.records.decoding import decode_records_to_batch
from rocketspark.remoting.client import RemotingClient

#: messages one pull asks for to read their store times (an Apache broker answers at most 32)
TIMES_PER_PULL = 32

#: store times of the messages from an offset on: at least one for an offset the queue holds
ReadTimes = Callable[[int], Awaitable[Sequence[int]]]


async def first_at_or_after(timestamp: int, hint: int, low: int, high: int, read_times: ReadTimes) -> int:
    """The first offset in [low, high) whose store time is at least `timestamp`, `high` when none
    is; store times never decrease along a queue.

    Reads from just before `hint` (a broker's answer: usually the offset, or one beside it), then
    away from it in growing steps until the offset is between two reads, then halves that range:
    one read when the hint is right or next to it, a few more across messages of equal times."""
    lo, hi = low, high  # the offset lies in [lo, hi]; lo - 1 (if >= low) is older than the time
    lo_known = hi_known = False  # whether a read moved the bound (else it is the queue's end)
    step = TIMES_PER_PULL
    probe = min(max(hint - 1, low), high - 1)
    while lo < hi:
        times = (await read_times(probe))[: hi - probe]
        first_newer = bisect.bisect_left(times, timestamp)
        if first_newer < len(times):
            if first_newer > 0 or probe == lo:
                return probe + first_newer
            hi, hi_known = probe, True
        else:
            lo, lo_known = probe + len(times), True
        if lo_known and hi_known:
            probe = (lo + hi) // 2
        elif hi_known:  # going back from the hint
            probe = max(lo, hi - step)
        else:  # going forward
            probe = min(hi - 1, lo + step)
        step *= 2
    return hi


def pulled_store_times(
    remoting: RemotingClient, broker_addr: str, group: str, topic: str, queue_id: int, timeout_s: float | None = None
) -> ReadTimes:
    """Store times read with standard pulls (every tag, nothing committed, never held) as `group`."""

    async def read(offset: int) -> Sequence[int]:
        result = await read_pull(remoting, broker_addr, group, topic, queue_id, offset, TIMES_PER_PULL, timeout_s)
        batch = decode_records_to_batch(result.body, decompress=False) if result.body else None
        if result.status is not PullStatus.FOUND or batch is None or batch.num_rows == 0:
            raise RocketMQError(
                f"cannot read the store time at offset {offset} of {topic}:{queue_id} on {broker_addr}: the pull "
                f"answered {result.status.value} (queue offsets {result.min_offset}..{result.max_offset})"
            )
        if batch.column("queue_offset")[0].as_py() != offset:
            raise RocketMQError(
                f"a pull at offset {offset} of {topic}:{queue_id} on {broker_addr} answered from offset "
                f"{batch.column('queue_offset')[0].as_py()}"
            )
        times: list[int] = batch.column("store_timestamp").to_pylist()
        return times

    return read


async def offset_for_time(
    remoting: RemotingClient,
    broker_addr: str,
    group: str,
    topic: str,
    queue_id: int,
    timestamp_ms: int,
    timeout_s: float | None = None,
) -> int:
    """The first offset of the queue whose message was stored at or after `timestamp_ms`; the max
    offset when none was. Asks the broker, then checks its answer by reading store times as `group`."""
    hint, low, high = await asyncio.gather(
        offset_api.search_offset(remoting, broker_addr, topic, queue_id, timestamp_ms, timeout_s),
        offset_api.get_min_offset(remoting, broker_addr, topic, queue_id, timeout_s),
        offset_api.get_max_offset(remoting, broker_addr, topic, queue_id, timeout_s),
    )
    read_times = pulled_store_times(remoting, broker_addr, group, topic, queue_id, timeout_s)
    return await first_at_or_after(timestamp_ms, hint, low, high, read_times)
