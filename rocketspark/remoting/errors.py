"""Transport and protocol errors of the remoting layer."""

from __future__ import annotations

from rocketspark.errors import RocketMQError
from rocketspark.remoting.codes import ResponseCode


class RemotingError(RocketMQError):
    """Base of errors raised by the remoting layer itself (no server answer involved)."""


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
