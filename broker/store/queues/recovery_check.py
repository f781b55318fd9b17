"""Recovery's check that the consume queues on disk agree with the commit log.

After a crash the consume queues may hold entries the commit log lost, or lack entries the
checkpoint vouched for; either way the store rebuilds them from the commit log instead of serving
offsets that point at the wrong messages.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from broker.store.log.commitlog import CommitLog
from broker.store.log.stored import as_batches
from broker.store.queues.consume_queue import ConsumeQueue
from rocketspark.errors import StoreCorruptionError

log = logging.getLogger(__name__)


def logics_agree_with_log(
    queues: Mapping[tuple[str, int], ConsumeQueue],
    commit_log: CommitLog,
    dispatched: int,
    expected_lengths: Mapping[str, int],
) -> bool:
    """Every queue must be as long as the checkpoint says, and its last entry before
    `dispatched` must name a stored message of that queue."""
    for key, length in expected_lengths.items():
        name, _, number = key.rpartition(":")
        queue = queues.get((name, int(number)))
        if (queue.max_offset if queue else 0) < length:
            log.warning("consume queue %s has fewer entries than the checkpoint vouched for", key)
            return False
    for (topic, queue_id), queue in queues.items():
        expected_offset = queue.last_offset_before(dispatched)
        if expected_offset is None:
            continue
        last = queue.entries(expected_offset, 1)[0]
        position = int(last["batch_pos"])
        if position < commit_log.min_offset:
            continue  # deleted by retention; dropped below
        try:
            batch = as_batches([commit_log.load(position)])[0]
        except (StoreCorruptionError, LookupError, OSError, ValueError):
            return False
        row = int(last["row"])
        if (
            row >= batch.num_rows
            or batch.column("topic")[row].as_py() != topic
            or batch.column("queue_id")[row].as_py() != queue_id
            or batch.column("queue_offset")[row].as_py() != expected_offset
        ):
            return False
    return True
