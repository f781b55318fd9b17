"""Turning a starting or ending position (earliest, latest, group, offsets, timestamp) into offsets."""

from __future__ import annotations

from rocketspark.message.queue import MessageQueue
from rocketspark.spark import offsets as offset_dicts
from rocketspark.spark.cluster import QueueView
from rocketspark.spark.options import Position, StartOrEnd


def resolve(
    view: QueueView, queues: list[MessageQueue], spec: StartOrEnd, group: str | None
) -> dict[MessageQueue, int]:
    """Offsets of `queues` for `spec`. Queues a JSON map does not name, and queues the group has no
    offset for, start at their latest offset."""
    if spec.position is Position.EARLIEST:
        return view.min_offsets(queues)
    if spec.position is Position.TIMESTAMP:
        assert spec.timestamp_ms is not None
        return view.offsets_for_timestamp(queues, spec.timestamp_ms)
    latest = view.max_offsets(queues)
    if spec.position is Position.LATEST:
        return latest
    if spec.position is Position.GROUP:
        assert group is not None
        committed = view.group_offsets(group, queues)
        return {q: latest[q] if committed[q] is None else min(committed[q] or 0, latest[q]) for q in queues}
    given = spec.offset_map()
    earliest_needed = [q for q in queues if given.get(q) == offset_dicts.EARLIEST]
    earliest = view.min_offsets(earliest_needed) if earliest_needed else {}
    result = {}
    for queue in queues:
        value = given.get(queue, offset_dicts.LATEST)
        result[queue] = (
            earliest[queue]
            if value == offset_dicts.EARLIEST
            else latest[queue]
            if value == offset_dicts.LATEST
            else value
        )
    return result
