"""The name server's optional allow-list of addresses for its write requests (`--write-allow-list`).

The name server has no ACL: without a list, anyone who reaches its port may register a broker, wipe
a broker's write permission, delete a topic's route or change the KV config. With a list, those
requests (`WRITE_CODES`) are answered NO_PERMISSION unless they come from a listed address or
network (`10.0.0.5`, `10.0.1.0/24`, `::1`); reading routes stays open to everyone.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable

from rocketspark.errors import ConfigError
from rocketspark.protocol.codes import RequestCode, ResponseCode, code_name
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.connection import Connection, HandlerResult, RequestHandler
from rocketspark.remoting.processor import ProcessorTable
from rocketspark.remoting.throttled_log import ThrottledLog

log = logging.getLogger(__name__)

WRITE_CODES = frozenset(
    {
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.PUT_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
    }
)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_allow_list(text: str) -> tuple[Network, ...]:
    """Comma-separated addresses and networks; ConfigError naming the entry it cannot read."""
    networks: list[Network] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ConfigError(
                f"--write-allow-list: {entry!r} is no address or network (as in 10.0.0.5 or 10.0.1.0/24)"
            ) from None
    if not networks:
        raise ConfigError("--write-allow-list names no address: leave it out to take writes from anyone")
    return tuple(networks)


def _peer_ip(connection: Connection) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    host = connection.remote_address.rsplit(":", 1)[0].strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class WriteGuardedTable(ProcessorTable):
    """A processor table whose write requests are served only from the addresses of `allowed`."""

    def __init__(self, allowed: tuple[Network, ...]) -> None:
        super().__init__()
        self.allowed = allowed
        self._refusals = ThrottledLog(log)

    def register(self, codes: int | Iterable[int], handler: RequestHandler) -> None:
        for code in [codes] if isinstance(codes, int) else codes:
            super().register(code, self._guarded(handler) if code in WRITE_CODES else handler)

    def _guarded(self, handler: RequestHandler) -> RequestHandler:
        def checked(connection: Connection, request: RemotingCommand) -> HandlerResult:
            ip = _peer_ip(connection)
            if ip is not None and any(ip in network for network in self.allowed):
                return handler(connection, request)
            name = code_name(request.code)
            self._refusals.log(
                "write refusals", "%s from %s refused: not on --write-allow-list", name, connection.remote_address
            )
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"{name} refused: this name server takes write requests only from the addresses of its "
                f"--write-allow-list, and {connection.remote_address} is not one",
            )

        return checked
