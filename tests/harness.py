"""Per-test factory of server subprocesses (see :mod:`rocketspark.processes`)."""

from __future__ import annotations

import time
from pathlib import Path

from rocketspark.processes import ServerProcess, broker_process, namesrv_process
from rocketspark.remoting.body.route import TopicRouteData
from rocketspark.remoting.codes import RequestCode, ResponseCode
from rocketspark.remoting.command import RemotingCommand
from rocketspark.remoting.headers.namesrv import GetRouteInfoRequestHeader
from rocketspark.remoting.sync import SyncRemotingClient

#: every broker serves this topic (TBW102) once it registered, unless autoCreateTopicEnable is off
_REGISTERED_PROBES = ("TBW102", "SELF_TEST_TOPIC")


def wait_registered(namesrv: str, broker: str, timeout_s: float = 15.0) -> None:
    """Block until the name server routes a system topic to `broker` (it registered)."""
    deadline = time.monotonic() + timeout_s
    with SyncRemotingClient() as client:
        while True:
            for topic in _REGISTERED_PROBES:
                request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic))
                response = client.invoke(namesrv, request, timeout_s=5)
                if response.code == ResponseCode.SUCCESS:
                    route = TopicRouteData.from_json(response.body)
                    if any(b.master_address == broker for b in route.broker_datas):
                        return
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {broker} did not register with {namesrv} within {timeout_s} s")
            time.sleep(0.05)


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
