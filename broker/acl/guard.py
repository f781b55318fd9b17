"""The ACL step of the broker's request path: every handler registered here runs only after the check.

A refused request is answered NO_PERMISSION (16, Apache RocketMQ 5's answer) with the reason as
remark, before any processor sees it: nothing of it is stored, and the connection serves on. Refusals
are logged at INFO through a ThrottledLog: at most one line per kind of refusal every 10 s, values
escaped, so a flood of refused requests cannot fill the log nor forge a line.
A processor that learns a resource only from what it reads asks `refusal` afterwards, or
`late_refusal` with what it read (None when ACL is off).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from broker.acl.addresses import client_ip
from broker.acl.resources import Needs
from broker.acl.validator import AccessValidator, Refusal
from rocketspark.protocol.codes import ResponseCode, code_name
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.connection import Connection, HandlerResult, RequestHandler
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.signing import ACCESS_KEY
from rocketspark.remoting.throttled_log import ThrottledLog

log = logging.getLogger(__name__)

_CLIENT_IP = "acl.client_ip"  # the peer's IP, kept in the connection's attributes


class GuardedProcessorTable(ProcessorTable):
    """A processor table whose handlers are each wrapped in the access check of `validator`."""

    def __init__(self, validator: AccessValidator) -> None:
        super().__init__()
        self.validator = validator
        self.refusals = ThrottledLog(log)

    def register(self, codes: int | Iterable[int], handler: RequestHandler) -> None:
        super().register(codes, self._guarded(handler))

    def refusal(self, connection: Connection, request: RemotingCommand, needs: Needs) -> str | None:
        """Why the account that signed `request` (already checked) may not have `needs`, or None."""
        access_key = request.ext_fields.get(ACCESS_KEY)
        refusal = self.validator.refused_needs(_peer_ip(connection), access_key, request.code, needs)
        if refusal is not None:
            self._log(connection, request, refusal)
        return refusal

    def _log(self, connection: Connection, request: RemotingCommand, refusal: Refusal) -> None:
        self.refusals.log(
            f"refusals ({refusal.kind})",
            "%s from %s refused: %s",
            code_name(request.code),
            connection.remote_address,
            refusal,
        )

    def _guarded(self, handler: RequestHandler) -> RequestHandler:
        validator = self.validator

        def checked(connection: Connection, request: RemotingCommand) -> HandlerResult:
            refusal = validator.check(_peer_ip(connection), request)
            if refusal is None:
                return handler(connection, request)
            self._log(connection, request, refusal)
            return request.response(ResponseCode.NO_PERMISSION, refusal)

        return checked


def needs_checking(table: ProcessorTable) -> bool:
    """Whether `table` checks requests (ACL on): a processor reads what a late check needs only then."""
    return isinstance(table, GuardedProcessorTable)


def late_refusal(table: ProcessorTable, connection: Connection, request: RemotingCommand, needs: Needs) -> str | None:
    """Why the account that signed `request` may not have `needs`, which its processor learnt from
    what it read (a stored message's own topic), or None; None too when `table` checks nothing (ACL off).

    The processor of CONSUMER_SEND_MSG_BACK asks it with the stored message's topic; END_TRANSACTION's
    asks it with `broker.acl.resources.end_transaction_needs(<the half message's REAL_TOPIC>)`."""
    if not needs_checking(table):
        return None
    assert isinstance(table, GuardedProcessorTable)
    return table.refusal(connection, request, needs)


def _peer_ip(connection: Connection) -> str:
    """The peer's IP, parsed once per connection."""
    ip = connection.attributes.get(_CLIENT_IP)
    if ip is None:
        ip = connection.attributes[_CLIENT_IP] = client_ip(connection.remote_address)
    return ip
