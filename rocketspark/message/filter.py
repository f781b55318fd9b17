"""Tag subscriptions: `*` or `TagA || TagB`, as Java's `FilterAPI.buildSubscriptionData`.

Brokers filter by tag hash codes (cheap, may collide); clients check the tag strings again.
"""

from __future__ import annotations

import time

from rocketspark.errors import ValidationError
from rocketspark.message.hashing import java_string_hash
from rocketspark.protocol.body.heartbeat import SUBSCRIBE_ALL, SubscriptionData
from rocketspark.protocol.codes import ResponseCode

TAG_EXPRESSION = "TAG"


def parse_tag_expression(expression: str | None) -> frozenset[str] | None:
    """The tags an expression accepts; None when it accepts every message."""
    if expression is None or expression.strip() in ("", SUBSCRIBE_ALL):
        return None
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    if not tags:
        raise ValidationError(
            f"tag expression {expression!r} names no tag; use '*' or 'TagA || TagB'",
            code=ResponseCode.SUBSCRIPTION_PARSE_FAILED,
        )
    return tags


def build_subscription(topic: str, expression: str | None, expression_type: str | None = None) -> SubscriptionData:
    kind = (expression_type or TAG_EXPRESSION).upper()
    if kind != TAG_EXPRESSION:
        raise ValidationError(
            f"filtering by {kind} expressions is not supported; use a tag expression",
            code=ResponseCode.SYSTEM_ERROR,
        )
    tags = parse_tag_expression(expression)
    ordered = sorted(tags) if tags is not None else []
    return SubscriptionData(
        topic=topic,
        sub_string=SUBSCRIBE_ALL if tags is None else (expression or "").strip(),
        tags_set=ordered,
        code_set=[java_string_hash(t) for t in ordered],
        sub_version=time.time_ns() // 1000,
    )


def filter_codes(subscription: SubscriptionData) -> frozenset[int] | None:
    """Tag hash codes a broker filters by; None for subscriptions to every tag.

    The codes are computed from the tags: the C++ client sends a `codeSet` of zeros.
    """
    if subscription.subscribes_all:
        return None
    return frozenset(java_string_hash(t) for t in subscription.tags_set)
