"""Turning a starting or ending position (earliest, latest, group, offsets, timestamp) into offsets."""

from __future__ import annotations

from rocketspark.message.queue import MessageQueue
from rocketspark.spark import offsets as offset_dicts
from rocketspark.spark.options import Position, StartOrEnd
from rocketspark.spark.queue_view import QueueView


def resolve(
    view: QueueView,
    queues: list[MessageQueue],
    spec: StartOrEnd,
    group: str | None,
    *,
    latest_as_of_ms: int | None = None,
) -> dict[MessageQueue, int]:
    """Offsets of `queues` for `spec`. Queues a JSON map does not name, and queues the group has no
    offset for, start at their latest offset.

    With `latest_as_of_ms`, "latest" means the latest offset at that time: the first message stored
    at or after it. That is where a query that started then would have put a queue it could not see
    (a broker that was away), and the earliest offset of a queue created after it (scale-out).

    Queues whose broker did not answer are left out (`view.unreachable` names them).
    """
    if spec.position is Position.EARLIEST:
        return view.min_offsets(queues)
    if spec.position is Position.TIMESTAMP:
        assert spec.timestamp_ms is not None
        return view.offsets_for_timestamp(queues, spec.timestamp_ms)
    latest = view.max_offsets(queues)
    fallback = latest if latest_as_of_ms is None else view.offsets_for_timestamp(queues, latest_as_of_ms)
    answered = [q for q in queues if q in latest and q in fallback]
    if spec.position is Position.LATEST:
        return {q: fallback[q] for q in answered}
    if spec.position is Position.GROUP:
        assert group is not None
        committed = view.group_offsets(group, answered)
        return {q: fallback[q] if committed[q] is None else min(committed[q] or 0, latest[q]) for q in committed}
    given = spec.offset_map()
    earliest_needed = [q for q in answered if given.get(q) == offset_dicts.EARLIEST]
    earliest = view.min_offsets(earliest_needed) if earliest_needed else {}
    result = {}
    for queue in answered:
        value = given.get(queue, offset_dicts.LATEST)
        if value == offset_dicts.EARLIEST:
            if queue in earliest:
                result[queue] = earliest[queue]
        else:
            result[queue] = fallback[queue] if value == offset_dicts.LATEST else value
    return result
