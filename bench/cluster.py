"""A fresh name server and broker for one scenario, on free loopback ports, in a temporary directory."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rocketspark.processes import ServerProcess, broker_process, namesrv_process, wait_registered


@dataclass(frozen=True)
class Cluster:
    namesrv: ServerProcess
    broker: ServerProcess
    data_dir: Path

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.address

    def commit_log_bytes(self) -> int:
        return sum(p.stat().st_size for p in (self.data_dir / "broker" / "commitlog").iterdir())


@contextmanager
def cluster(*, flush: str = "async", broker_settings: tuple[str, ...] = ()) -> Iterator[Cluster]:
    with tempfile.TemporaryDirectory(prefix="rocketspark-bench-") as tmp:
        root = Path(tmp)
        extra = ["--flush", flush, "--log-level", "WARNING"]
        for setting in broker_settings:
            extra += ["--set", setting]
        with (
            namesrv_process(root / "namesrv", "--log-level", "WARNING") as namesrv,
            broker_process(root / "broker", namesrv.address, *extra) as broker,
        ):
            wait_registered(namesrv.address, broker.address)
            yield Cluster(namesrv, broker, root)
