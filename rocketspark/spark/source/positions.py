"""Turning a starting or ending position (earliest, latest, group, offsets, timestamps) into offsets."""

from __future__ import annotations

from rocketspark.errors import ConfigError
from rocketspark.protocol.queue import MessageQueue
from rocketspark.spark.options import Position, StartOrEnd
from rocketspark.spark.source import offsets as offset_dicts
from rocketspark.spark.source.queue_view import QueueView


def resolve(
    view: QueueView,
    queues: list[MessageQueue],
    spec: StartOrEnd,
    group: str | None,
    *,
    latest_as_of_ms: int | None = None,
    strict: bool = False,
) -> dict[MessageQueue, int]:
    """Offsets of `queues` for `spec`. Queues a JSON map does not name, and queues the group has no
    offset for, start at their latest offset.

    With `latest_as_of_ms`, "latest" means the latest offset at that time: the first message stored
    at or after it. That is where a query that started then would have put a queue it could not see
    (a broker that was away), and the earliest offset of a queue created after it (scale-out).

    A start by time with `spec.fail_if_none_newer` (startingOffsetsByTimestampStrategy=error) fails
    when `strict` (the query's own start, not a queue placed later) and a queue holds messages but
    none stored at or after its time; otherwise such a queue starts at its latest offset.

    Queues whose broker did not answer are left out (`view.unreachable` names them).
    """
    if spec.position is Position.EARLIEST:
        return view.min_offsets(queues)
    stamps = _timestamps(spec, queues)
    if stamps is not None:
        found = view.offsets_for_timestamps(stamps)
        if strict and spec.fail_if_none_newer:
            _fail_if_none_newer(view, stamps, found)
        unnamed = [q for q in queues if q not in stamps]  # by JSON: they start or end at latest
        return {**found, **(_latest(view, unnamed, latest_as_of_ms) if unnamed else {})}
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


def require_named_queues(spec: StartOrEnd, queues: list[MessageQueue], option: str) -> None:
    """A time per queue (`option`: startingOffsetsByTimestamp or endingOffsetsByTimestamp) names
    only queues the read's topics have, all of `queues`: a misspelt broker, topic or queue id fails
    rather than being ignored, as Kafka's source fails when its JSON's partitions do not match the
    topic's. (Queues it does not name start or end at latest, which Kafka does not allow.)"""
    if spec.position is not Position.TIMESTAMPS:
        return
    known = set(queues)
    unknown = sorted(q for q in spec.offset_map() if q not in known)
    if unknown:
        raise ConfigError(
            f"option {option} names queues the topics do not have: {', '.join(map(str, unknown))} "
            f"(topic@broker#queueId); they have {', '.join(map(str, sorted(known))) or 'none'}"
        )


def _timestamps(spec: StartOrEnd, queues: list[MessageQueue]) -> dict[MessageQueue, int] | None:
    """The time each queue starts or ends at, for a position by time (None for the others)."""
    if spec.position is Position.TIMESTAMP:
        assert spec.timestamp_ms is not None
        return dict.fromkeys(queues, spec.timestamp_ms)
    if spec.position is Position.TIMESTAMPS:
        listed = set(queues)
        return {q: t for q, t in spec.offset_map().items() if q in listed}
    return None


def _latest(view: QueueView, queues: list[MessageQueue], as_of_ms: int | None) -> dict[MessageQueue, int]:
    return view.max_offsets(queues) if as_of_ms is None else view.offsets_for_timestamp(queues, as_of_ms)


def _fail_if_none_newer(view: QueueView, stamps: dict[MessageQueue, int], found: dict[MessageQueue, int]) -> None:
    latest, earliest = view.max_offsets(found), view.min_offsets(found)
    none_newer = sorted(q for q in found if q in latest and q in earliest and found[q] >= latest[q] > earliest[q])
    if none_newer:
        details = "; ".join(f"{q.describe()}: none at or after {stamps[q]}" for q in none_newer)
        raise ConfigError(
            f"no message is stored at or after the starting time in {details}; set "
            "startingOffsetsByTimestampStrategy=latest to start such queues at their latest offset"
        )
