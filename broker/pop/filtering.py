"""Which messages a receive wants: a 5.x filter expression.

TAG expressions (`*`, `TagA || TagB`) as the 4.x side parses them (rocketspark/message/filter.py):
the store skips by tag hash codes, then the tag itself is compared, so a hash collision delivers
nothing it should not (Apache's proxy compares the tags again too). SQL92 expressions are refused
NOT_IMPLEMENTED: this broker filters by tags only.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.pop.errors import PopError, Refusal
from rocketspark.errors import ValidationError
from rocketspark.message.filter import TAG_EXPRESSION, parse_tag_expression
from rocketspark.message.hashing import java_string_hash

SQL92_EXPRESSION = "SQL92"


@dataclass(frozen=True, slots=True)
class TagFilter:
    tags: frozenset[str] | None  # None: every message

    @property
    def codes(self) -> frozenset[int] | None:
        """The tag hash codes the store filters by."""
        return None if self.tags is None else frozenset(java_string_hash(t) for t in self.tags)

    def accepts(self, tags: str | None) -> bool:
        return self.tags is None or (tags is not None and tags in self.tags)


EVERYTHING = TagFilter(None)


def tag_filter(kind: str, expression: str) -> TagFilter:
    """The filter of an expression of `kind` (TAG, or empty for TAG); refused for other kinds."""
    kind = (kind or TAG_EXPRESSION).upper()
    if kind == SQL92_EXPRESSION:
        raise PopError(
            Refusal.NOT_IMPLEMENTED,
            "SQL92 filter expressions are not supported by this broker: subscribe with a TAG expression",
        )
    if kind != TAG_EXPRESSION:
        raise PopError(Refusal.ILLEGAL_FILTER_EXPRESSION, f"unknown filter expression type {kind[:32]!r}: use TAG")
    try:
        return TagFilter(parse_tag_expression(expression))
    except ValidationError as exc:
        raise PopError(Refusal.ILLEGAL_FILTER_EXPRESSION, str(exc)) from exc
