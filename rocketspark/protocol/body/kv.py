"""Key/value bodies."""

from __future__ import annotations

from dataclasses import dataclass, field

from rocketspark.protocol.body.jsonbody import JsonBody


@dataclass(slots=True)
class KVTable(JsonBody):
    table: dict[str, str] = field(default_factory=dict)
