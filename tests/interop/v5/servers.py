"""Brokers serving gRPC for the 5.x client tests (and the Spark test that reads what 5.x clients send)."""

from __future__ import annotations

import re

from rocketspark.processes import ServerProcess
from tests.harness import ServerFactory, free_port

_GRPC_LINE = re.compile(r"gRPC endpoint for RocketMQ 5\.x clients is at (\S+)")
#: a free port can be taken by another test between our look and the broker's bind: try again
_BIND_TRIES = 3


def grpc_endpoint(broker: ServerProcess) -> str:
    """The `host:port` the broker printed for its gRPC endpoint."""
    for line in broker.output:
        match = _GRPC_LINE.search(line)
        if match:
            return match.group(1)
    raise AssertionError(f"the broker printed no gRPC endpoint line: {broker.output}")


def grpc_broker(servers: ServerFactory, namesrv: str, *extra: str) -> tuple[ServerProcess, str]:
    """A broker with its gRPC endpoint on a free port (`extra`: more broker flags); it and its endpoint."""
    for attempt in range(_BIND_TRIES):
        try:
            broker = servers.broker(namesrv, "--grpc-port", str(free_port()), *extra)
        except RuntimeError as exc:
            if "cannot listen" in str(exc) and attempt + 1 < _BIND_TRIES:
                continue
            raise
        return broker, grpc_endpoint(broker)
    raise AssertionError("unreachable")
