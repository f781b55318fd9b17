"""White-list address patterns of the accounts file, as Apache RocketMQ's RemoteAddressStrategyFactory reads them.

| pattern | matches |
|---|---|
| empty or missing | nothing |
| `*` (or `*.*.*.*`, `*:*:*:*:*:*:*:*`) | every address |
| `192.168.1.{1,2}` | the listed last parts |
| `192.168.1.1,192.168.1.2` (or IPv6 addresses) | the listed addresses |
| `192.168.1.*`, `192.168.*.*`, `192.168.1.1-100`, `10.10-20.*.*` | an IPv4 range (`*` only after the range) |
| `192.168.1.1`, `::1` | that address |

A pattern it cannot read raises ValueError with the reason; the accounts file reports it with its line.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

#: whether a client's IP address (text, without port) matches a pattern
AddressMatcher = Callable[[str], bool]

_EVERY = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


def normalize_ip(text: str) -> str:
    """The canonical form of an IP address (an IPv4-mapped IPv6 address as its IPv4 form); ValueError otherwise."""
    address = ipaddress.ip_address(text.strip().strip("[]"))
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def client_ip(remote_address: str) -> str:
    """The IP of a connection's `host:port` peer address, normalized for matching."""
    host = remote_address.rsplit(":", 1)[0]
    try:
        return normalize_ip(host)
    except ValueError:
        return host


def parse_address_pattern(pattern: str | None) -> AddressMatcher:
    """A matcher of the pattern (see the module docstring)."""
    text = (pattern or "").strip()
    if not text:
        return lambda ip: False
    if text in _EVERY:
        return lambda ip: True
    if text.endswith("}"):
        return _one_of(_expand_braces(text))
    if "," in text:
        return _one_of([part for part in text.split(",") if part.strip()])
    if "*" in text or "-" in text:
        return _Ipv4Range.parse(text).matches
    return _one_of([text])


def _one_of(addresses: list[str]) -> AddressMatcher:
    allowed = set()
    for address in addresses:
        try:
            allowed.add(normalize_ip(address))
        except ValueError:
            raise ValueError(f"{address.strip()!r} is not an IP address") from None
    return allowed.__contains__


def _expand_braces(text: str) -> list[str]:
    """`192.168.1.{1,2}` -> the addresses with each listed last part."""
    head, sep, choices = text[:-1].rpartition("{")
    separator = ":" if ":" in text else "."
    if not sep or not head.endswith(separator):
        raise ValueError(f"{text!r}: braces must hold the whole last part, as in 192.168.1.{{1,2}}")
    return [head + choice.strip() for choice in choices.split(",") if choice.strip()]


@dataclass(frozen=True, slots=True)
class _Ipv4Range:
    head: tuple[str, ...]  # the fixed leading parts
    start: int
    end: int

    @classmethod
    def parse(cls, text: str) -> _Ipv4Range:
        parts = [part.strip() for part in text.split(".")]
        if len(parts) != 4 or ":" in text:
            raise ValueError(f"{text!r}: ranges are IPv4 patterns of four parts, as in 192.168.1.1-100 or 10.10.*.*")
        position = next((i for i, part in enumerate(parts) if part == "*" or "-" in part), 0)
        if position == 0:
            raise ValueError(f"{text!r}: the first part cannot be a range")
        if any(part != "*" for part in parts[position + 1 :]):
            raise ValueError(f"{text!r}: only '*' may follow a range part")
        for part in parts[:position]:
            if not part.isdigit() or int(part) > 255:
                raise ValueError(f"{text!r}: {part!r} is not a number within 0..255")
        start, end = _bounds(parts[position], text)
        return cls(tuple(str(int(p)) for p in parts[:position]), start, end)

    def matches(self, ip: str) -> bool:
        parts = ip.split(".")
        count = len(self.head)
        if len(parts) != 4 or tuple(parts[:count]) != self.head or not parts[count].isdigit():
            return False
        return self.start <= int(parts[count]) <= self.end


def _bounds(part: str, text: str) -> tuple[int, int]:
    if part == "*":
        return 0, 255
    low, _, high = part.partition("-")
    if not low.strip().isdigit() or not high.strip().isdigit():
        raise ValueError(f"{text!r}: a range part is two numbers, as in 1-100")
    start, end = int(low), int(high)
    if not 0 <= start <= end <= 255:
        raise ValueError(f"{text!r}: the range {part} must lie within 0..255, low to high")
    return start, end
