"""The `Status` of the 5.x endpoint's answers, and the one translation of the broker's 4.x refusals.

The broker's shared code (sends, names, transactions) refuses with RocketMQError carrying a 4.x
response code; a 5.x client expects a v2 `Code` (BAD_REQUEST, TOPIC_NOT_FOUND, ...) with a message a
person can act on, which every RPC answers in its `status` field rather than as a gRPC error.
"""

from __future__ import annotations

from broker.grpc.v2 import definition_pb2 as pb
from rocketspark.errors import RocketMQError
from rocketspark.protocol.codes import ResponseCode

_BY_RESPONSE_CODE: dict[int, pb.Code] = {
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.INVALID_PARAMETER: pb.BAD_REQUEST,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: pb.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.FLOW_CONTROL: pb.TOO_MANY_REQUESTS,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: pb.NOT_IMPLEMENTED,
    ResponseCode.VERSION_NOT_SUPPORTED: pb.VERSION_UNSUPPORTED,
}


class StatusError(Exception):
    """An RPC refused with a 5.x status code; the exception's text is the status message."""

    def __init__(self, code: pb.Code, message: str) -> None:
        super().__init__(message)
        self.code = code

    def status(self) -> pb.Status:
        return pb.Status(code=self.code, message=str(self))


def ok() -> pb.Status:
    return pb.Status(code=pb.OK, message="OK")


def code_of(exc: RocketMQError) -> pb.Code:
    """The v2 code of a refusal by the broker's shared code (INTERNAL_SERVER_ERROR when it has none)."""
    return _BY_RESPONSE_CODE.get(exc.code or ResponseCode.SYSTEM_ERROR, pb.INTERNAL_SERVER_ERROR)


def status_of(exc: StatusError | RocketMQError) -> pb.Status:
    if isinstance(exc, StatusError):
        return exc.status()
    return pb.Status(code=code_of(exc), message=str(exc))
