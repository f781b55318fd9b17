"""Refusals of the pop engine, named as the RocketMQ 5.x status codes that answer them.

The engine knows no gRPC: the 5.x endpoint (broker/grpc/consuming.py) answers a refusal with the
`apache.rocketmq.v2.Code` of the same name.
"""

from __future__ import annotations

import enum

from rocketspark.errors import RocketMQError


class Refusal(enum.Enum):
    BAD_REQUEST = "BAD_REQUEST"
    ILLEGAL_CONSUMER_GROUP = "ILLEGAL_CONSUMER_GROUP"
    ILLEGAL_FILTER_EXPRESSION = "ILLEGAL_FILTER_EXPRESSION"
    ILLEGAL_INVISIBLE_TIME = "ILLEGAL_INVISIBLE_TIME"
    INVALID_RECEIPT_HANDLE = "INVALID_RECEIPT_HANDLE"
    FORBIDDEN = "FORBIDDEN"
    TOPIC_NOT_FOUND = "TOPIC_NOT_FOUND"
    CONSUMER_GROUP_NOT_FOUND = "CONSUMER_GROUP_NOT_FOUND"
    TOO_MANY_REQUESTS = "TOO_MANY_REQUESTS"
    INTERNAL_SERVER_ERROR = "INTERNAL_SERVER_ERROR"


class PopError(RocketMQError):
    """A request the engine refuses; `refusal` names the 5.x status, the message says what to fix."""

    def __init__(self, refusal: Refusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal
