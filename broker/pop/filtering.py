"""Which messages a receive wants: a 5.x filter expression, TAG or SQL92.

TAG expressions (`*`, `TagA || TagB`) as the 4.x side parses them (rocketspark/message/filter.py):
the store skips by tag hash codes, then the tag itself is compared, so a hash collision delivers
nothing it should not (Apache's proxy compares the tags again too). SQL92 expressions test each
message's properties (broker/pop/sql92.py), as Apache's broker does with enablePropertyFilter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.pop.errors import PopError, Refusal
from broker.pop.sql92 import compile_sql92
from rocketspark.errors import ValidationError
from rocketspark.message.filter import TAG_EXPRESSION, parse_tag_expression
from rocketspark.message.hashing import java_string_hash
from rocketspark.message.properties import codec as props

SQL92_EXPRESSION = "SQL92"


@dataclass(frozen=True, slots=True)
class TagFilter:
    tags: frozenset[str] | None  # None: every message
    # the tag hash codes the store filters by (None: it passes every message on); hashed once, not
    # at each of a receive's reads
    codes: frozenset[int] | None = field(init=False, compare=False)

    def __post_init__(self) -> None:
        codes = None if self.tags is None else frozenset(java_string_hash(t) for t in self.tags)
        object.__setattr__(self, "codes", codes)  # a frozen dataclass's field set once, here

    def accepts(self, row: Mapping[str, Any]) -> bool:
        """Whether a stored message (a STORED_SCHEMA row) is wanted."""
        tags = row["tags"]
        return self.tags is None or (tags is not None and tags in self.tags)


@dataclass(frozen=True, slots=True)
class Sql92Filter:
    expression: str
    test: Callable[[Mapping[str, str]], bool]

    @property
    def codes(self) -> frozenset[int] | None:
        return None

    def accepts(self, row: Mapping[str, Any]) -> bool:
        return self.test(props.decode_properties(row["properties"]))


MessageFilter = TagFilter | Sql92Filter
EVERYTHING = TagFilter(None)


def message_filter(kind: str, expression: str) -> MessageFilter:
    """The filter of an expression of `kind` (TAG, or empty for TAG, or SQL92); refused for others."""
    kind = (kind or TAG_EXPRESSION).upper()
    if kind == SQL92_EXPRESSION:
        return Sql92Filter(expression, compile_sql92(expression))
    if kind != TAG_EXPRESSION:
        raise PopError(Refusal.ILLEGAL_FILTER_EXPRESSION, f"unknown filter expression type {kind[:32]!r}: use TAG")
    try:
        return TagFilter(parse_tag_expression(expression))
    except ValidationError as exc:
        raise PopError(Refusal.ILLEGAL_FILTER_EXPRESSION, str(exc)) from exc
