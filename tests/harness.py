"""Per-test factory of server subprocesses (see :mod:`rocketspark.processes`)."""

from __future__ import annotations

from pathlib import Path

from rocketspark.processes import ServerProcess, broker_process, namesrv_process, wait_registered


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
        process = broker_process(data_dir or self._next_dir(broker_name), namesrv, *extra, broker_name=broker_name)
        self.processes.append(process)
        process.start()
        wait_registered(namesrv.split(";", maxsplit=1)[0], process.address)
        return process

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            process.stop()
