"""The mark a Spark query reading with the rocketspark source leaves in the name servers' KV
config, so admin tools can tell which query a consumer group belongs to: the source never joins its
group (no member is ever online), and a 4.x admin request (GET_KV_CONFIG) reads the mark.

Namespace `ROCKETSPARK_SPARK_SOURCE`, key: the consumer group, value: this body as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rocketspark.protocol.body.jsonbody import JsonBody

NAMESPACE = "ROCKETSPARK_SPARK_SOURCE"


@dataclass(slots=True)
class QueryMark(JsonBody):
    query_id: str
    run_id: str = ""
    query_name: str = ""
    topics: list[str] = field(default_factory=list)
    marked_at: int = 0  # ms: when a task of this run wrote it
