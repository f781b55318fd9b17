"""The mark a streaming query leaves for admin tools: which Spark query reads as its consumer group.

The source never joins its group (rocketspark.spark.source.offset_mirror), so no broker lists it as
a member. Instead, the first task of each query run in a Python worker writes a `QueryMark` (query
id, run id, name, topics: rocketspark.protocol.body.query_mark) under the group's name into the name
servers' KV config (PUT_KV_CONFIG), which `rocketspark dashboard` reads with GET_KVLIST_BY_NAMESPACE.
The driver's reader cannot write it: Spark tells only tasks which query they belong to, through the
local properties of their job (`sql.streaming.queryId`, and the job group and description the
stream sets: its run id, and its name on the description's first line).

Writing is best effort: a name server that refuses it (`--write-allow-list`) or cannot be reached
is logged once per process at INFO; the query reads on either way.
"""

from __future__ import annotations

import logging
import time

from pyspark import TaskContext

from rocketspark.client.api.kv import put_kv_config
from rocketspark.errors import RocketMQError
from rocketspark.protocol.body.query_mark import NAMESPACE, QueryMark
from rocketspark.spark import cluster
from rocketspark.spark.options import SourceOptions

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
RUN_ID_PROPERTY = "spark.jobGroup.id"
DESCRIPTION_PROPERTY = "spark.job.description"

_marked: set[tuple[str, str]] = set()  # (group, run id) marked by this process
_failed_once = False


def query_of_task() -> QueryMark | None:
    """The streaming query the running task belongs to (None outside one)."""
    context = TaskContext.get()
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
    if context is None or not query_id:
        return None
    run_id = context.getLocalProperty(RUN_ID_PROPERTY) or ""
    lines = (context.getLocalProperty(DESCRIPTION_PROPERTY) or "").splitlines()
    name = lines[0].strip() if len(lines) > 1 and lines[1].strip() == f"id = {query_id}" else ""
    return QueryMark(query_id, run_id, name)


def mark_query(options: SourceOptions) -> None:
    """Write the mark of this task's query run for its group, once per process and run."""
    global _failed_once  # noqa: PLW0603 - one log line per process
    group = options.consumer_group
    mark = query_of_task()
    if group is None or mark is None or (group, mark.run_id) in _marked:
        return
    _marked.add((group, mark.run_id))
    mark.topics = sorted(options.topics)
    mark.marked_at = int(time.time() * 1000)
    instance = cluster.source_instance(options)
    value = mark.to_json().decode()
    for address in instance.namesrv.addresses:
        try:
            cluster.run(put_kv_config(instance.remoting, address, NAMESPACE, group, value))
        except RocketMQError as exc:
            if not _failed_once:
                log.info(
                    "name server %s did not take the mark of query %s (group %s): %s",
                    address,
                    mark.query_id,
                    group,
                    exc,
                )
                _failed_once = True
