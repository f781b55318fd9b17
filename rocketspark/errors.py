"""The one error hierarchy of rocketspark, rooted at :class:`RocketMQError`.

Every error says what went wrong in words a user can act on, carries the RocketMQ response code
when a server answered with one, and tells whether retrying the same call can help. Besides the
errors of a server's answer (`ResponseError` and its subclasses, one per response code), it holds
the remoting layer's own (`RemotingError`): bytes that are not a frame or a header, which
`rocketspark.protocol` raises, and failed connects, deadlines and closed connections, which the
transport (`rocketspark.remoting`) raises.
"""

from __future__ import annotations

from typing import ClassVar

from rocketspark.protocol.codes import ResponseCode, code_name


class RocketMQError(Exception):
    """Base of every rocketspark error."""

    retriable: ClassVar[bool] = False

    def __init__(self, message: str, *, code: int | None = None, remark: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.remark = remark


class ConfigError(RocketMQError, ValueError):
    """A bad option or setting, detected before anything is sent."""


class DataLossError(RocketMQError):
    """Messages a reader was to read are gone (retention, a deleted topic, fewer queues)."""


class BrokerNotAvailableError(RocketMQError):
    """No route lists the broker now (stopped, restarting, not registered yet): it may come back."""

    retriable = True


class DecodeError(RocketMQError, ValueError):
    """Bytes that are not what they claim to be (a corrupt record, a body that does not decompress, a
    malformed batch body): no retry of the same bytes decodes them."""


class StoreCorruptionError(RocketMQError):
    """A broker's files do not hold what its indexes name (a record cut short, overwritten or out of
    place): a read of it fails with this, where a record gone by retention is a LookupError."""


class TransactionRecordError(RocketMQError):
    """A transactional write's batch record exists but cannot be read: what committed is not known,
    so nothing is ended from it."""


class ValidationError(RocketMQError, ValueError):
    """A name, message or request that RocketMQ's rules refuse; `code` is what a broker answers."""


class RemotingError(RocketMQError):
    """Base of errors of the remoting layer itself, no server answer involved: bytes that are not a
    frame or a header (raised by `rocketspark.protocol`), and failed connections, deadlines and
    closes (raised by the transport, `rocketspark.remoting`)."""


class ProtocolError(RemotingError):
    """Bytes that are not a RocketMQ remoting frame; the connection that carried them is closed."""


class HeaderFieldError(RemotingError):
    """A request or response header lacks a required field or carries an unparsable or out-of-range
    value. Its message names the field; `code` is what a server answers such a request with."""

    def __init__(self, message: str, *, code: int | None = ResponseCode.INVALID_PARAMETER) -> None:
        super().__init__(message, code=code)


class RemotingConnectError(RemotingError):
    """A connection to a name server or broker could not be opened."""

    retriable = True


class TlsHandshakeError(RemotingConnectError):
    """A TLS connection failed its handshake: an untrusted certificate, or a server without TLS."""

    retriable = False


class RemotingTimeoutError(RemotingError):
    """No response arrived before the request's deadline."""

    retriable = True


class ConnectionClosedError(RemotingError):
    """The connection closed while a request was waiting for its response."""

    retriable = True


class TlsRequiredError(ConnectionClosedError):
    """A plain connection was closed by the server before it answered anything: most likely a
    server that enforces TLS (`tls.server.mode=enforcing`). The message names the option to set."""


class ResponseError(RocketMQError):
    """A server answered a request with a code other than SUCCESS."""

    response_code: ClassVar[ResponseCode | None] = None
    _by_code: ClassVar[dict[int, type[ResponseError]]] = {}

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        code = cls.__dict__.get("response_code")  # a subclass that inherits its code does not take it over
        if code is not None:
            ResponseError._by_code[int(code)] = cls

    @staticmethod
    def for_code(code: int, remark: str | None, context: str) -> ResponseError:
        """The most specific error class for `code`, with a message naming `context`."""
        cls = ResponseError._by_code.get(code, ResponseError)
        reason = remark
        acl_refusal = acl_exception_text(remark) if code == ResponseCode.SYSTEM_ERROR else None
        if acl_refusal is not None:  # Apache 4.x answers a refusal of its ACL check so
            cls, reason = AccessDeniedError, acl_refusal
        elif code == ResponseCode.NO_PERMISSION and remark and remark.startswith(ACL_REFUSAL_PREFIX):
            cls = AccessDeniedError  # the bundled broker's ACL; other 16s (a topic not writable) are not
        detail = f": {reason.strip()}" if reason and reason.strip() else ""
        message = f"{context} failed with {code_name(code, ResponseCode)}{detail}"
        if cls is AccessDeniedError and reason and any(words in reason for words in _UNSIGNED_REFUSALS):
            message += f"; {CREDENTIALS_FIX}"
        return cls(message, code=code, remark=remark)


class ServerSystemError(ResponseError):
    response_code = ResponseCode.SYSTEM_ERROR


class SystemBusyError(ResponseError):
    response_code = ResponseCode.SYSTEM_BUSY
    retriable = True


class RequestCodeNotSupportedError(ResponseError):
    response_code = ResponseCode.REQUEST_CODE_NOT_SUPPORTED


class FlushDiskTimeoutError(ResponseError):
    response_code = ResponseCode.FLUSH_DISK_TIMEOUT
    retriable = True


class MessageIllegalError(ResponseError):
    response_code = ResponseCode.MESSAGE_ILLEGAL


class ServiceNotAvailableError(ResponseError):
    response_code = ResponseCode.SERVICE_NOT_AVAILABLE
    retriable = True


class NoPermissionError(ResponseError):
    """The server refused the request for lack of a permission; its remark says which."""

    response_code = ResponseCode.NO_PERMISSION


class AccessDeniedError(NoPermissionError):
    """A broker's access control refused the request (the bundled broker's NO_PERMISSION whose
    remark starts with `ACL_REFUSAL_PREFIX`, or Apache 4.x's SYSTEM_ERROR carrying an
    `AclException`): no or wrong credentials, or an account without the permission. The message
    carries the broker's reason, which names the permission and the resource refused. Retrying with
    the same credentials cannot help. Any other NO_PERMISSION (a topic or broker whose permission
    was wiped) stays a NoPermissionError, which sends try again on another broker."""


#: how the bundled broker's access control starts the remark of every refusal (broker.acl)
ACL_REFUSAL_PREFIX = "No permission: "
#: what an unsigned request's refusal says: ours, and Apache 4.x's AclException
_UNSIGNED_REFUSALS = ("carries no AccessKey", "No accessKey is configured")
#: how to sign requests, in each client's words
CREDENTIALS_FIX = (
    "pass credentials: credentials=SessionCredentials(access_key, secret_key) in the client, "
    "--access-key or ROCKETMQ_ACCESS_KEY with ROCKETMQ_SECRET_KEY for the rocketspark command, "
    "accessKey and secretKey in Spark"
)


#: how Apache 4.x's remark of a refused ACL check starts its exception's text
_ACL_EXCEPTION = "AclException: "


def acl_exception_text(remark: str | None) -> str | None:
    """The reason of an `AclException` in an Apache 4.x broker's remark (`<class>: <reason>, <the
    first stack frame>`), None when the remark is no such refusal."""
    if not remark or _ACL_EXCEPTION not in remark:
        return None
    reason = remark.split(_ACL_EXCEPTION, 1)[1]
    frame = reason.rfind(", org.apache.")
    return (reason[:frame] if frame >= 0 else reason).strip()


class TopicNotExistError(ResponseError):
    response_code = ResponseCode.TOPIC_NOT_EXIST


class QueryNotFoundError(ResponseError):
    response_code = ResponseCode.QUERY_NOT_FOUND


class SubscriptionGroupNotExistError(ResponseError):
    response_code = ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


class InvalidParameterError(ResponseError):
    response_code = ResponseCode.INVALID_PARAMETER


class FlowControlError(ResponseError):
    response_code = ResponseCode.FLOW_CONTROL
    retriable = True
