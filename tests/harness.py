"""Per-test factory of server subprocesses (see :mod:`rocketspark.processes`)."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rocketspark.processes import ServerProcess, broker_process, namesrv_process, wait_registered


def free_port() -> int:
    """A loopback port free now (another process may take it before it is bound: bind soon)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def dev_args(data_dir: Path | str, *extra: str, grpc_port: int = 0, dashboard_port: int = 0) -> list[str]:
    """`rocketspark dev`'s flags for a test: every port free (0: a free one, or off for the gRPC
    endpoint and the dashboard) unless given, so no test binds the defaults 9876, 10911, 8081, 8082."""
    ports = ("--namesrv-port", "0", "--broker-port", "0", "--grpc-port", str(grpc_port))
    return [*ports, "--dashboard-port", str(dashboard_port), "--data-dir", str(data_dir), *extra]


class ServerFactory:
    """Starts servers for one test and stops every one of them at teardown."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.processes: list[ServerProcess] = []
        self._count = 0

    def _next_dir(self, kind: str) -> Path:
        self._count += 1
        return self.base_dir / f"{kind}-{self._count}"

    def namesrv(self, *extra: str, data_dir: Path | None = None) -> ServerProcess:
        process = namesrv_process(data_dir or self._next_dir("namesrv"), *extra)
        self.processes.append(process)
        process.start()
        return process

    def broker(
        self, namesrv: str, *extra: str, broker_name: str = "broker-a", data_dir: Path | None = None
    ) -> ServerProcess:
        """A broker registered with `namesrv`; `extra` flags such as `--flush sync` or `--set key=value`."""
        return self._start_broker(namesrv, extra, broker_name, data_dir or self._next_dir(broker_name))

    def brokers(
        self, namesrv: str, names: Sequence[str], *extra: str, data_dirs: Mapping[str, Path] | None = None
    ) -> dict[str, ServerProcess]:
        """Brokers `names`, each as :meth:`broker` makes it, started side by side (each boots an
        interpreter and registers: they need not wait for one another); by name, in the order of `names`."""
        dirs = {name: (data_dirs or {}).get(name) or self._next_dir(name) for name in names}
        with ThreadPoolExecutor(len(names)) as pool:
            started = {name: pool.submit(self._start_broker, namesrv, extra, name, dirs[name]) for name in names}
        return {name: future.result() for name, future in started.items()}

    def _start_broker(self, namesrv: str, extra: tuple[str, ...], broker_name: str, data_dir: Path) -> ServerProcess:
        process = broker_process(data_dir, namesrv, *extra, broker_name=broker_name)
        self.processes.append(process)  # before it starts: stop_all stops it whatever happens next
        process.start()
        wait_registered(namesrv.split(";", maxsplit=1)[0], process.address)
        return process

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            process.stop()
