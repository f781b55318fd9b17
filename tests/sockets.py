"""This machine's IPv4 TCP sockets and the processes holding them, from Linux /proc: for tests that
must tell one server's sockets from another's (other tests' servers share the machine and ports)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

LISTEN = "0A"
ESTABLISHED = "01"


@dataclass(frozen=True)
class TcpSocket:
    local: str  # "127.0.0.1:8080"
    remote: str
    state: str  # /proc/net/tcp's hex state: LISTEN, ESTABLISHED, ...
    inode: int


def _address(hex_address: str) -> str:
    """`0100007F:1F90` (/proc/net/tcp, little-endian IPv4) -> `127.0.0.1:8080`."""
    ip, port = hex_address.split(":")
    return ".".join(str(int(ip[i : i + 2], 16)) for i in (6, 4, 2, 0)) + f":{int(port, 16)}"


def tcp_sockets() -> list[TcpSocket]:
    sockets = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        sockets.append(TcpSocket(_address(fields[1]), _address(fields[2]), fields[3], int(fields[9])))
    return sockets


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process `pid` holds (OSError when it is gone or not ours); a file it
    closes while they are read is left out."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:  # closed since the listing (the process goes on working meanwhile)
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes
