"""Serving the dashboard with uvicorn on the caller's event loop: `rocketspark dashboard` runs it
alone, `rocketspark dev` beside its name server and broker.

uvicorn's own signal handling is left off: the process's one SIGTERM/SIGINT handler
(rocketspark.serving.serve_until_signalled) stops the dashboard with everything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import uvicorn

from rocketspark.dashboard.app import DashboardSettings, create_app

log = logging.getLogger(__name__)

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the process's handler stops the dashboard (see the module's docstring)


class DashboardServer:
    def __init__(self, settings: DashboardSettings, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.guarded = settings.password is not None
        config = uvicorn.Config(
            create_app(settings),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="on",
            server_header=False,
            h11_max_incomplete_event_size=16 * 1024,
        )
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> str:
        """Serve; returns the "host:port" it listens on once it accepts connections."""
        if self.host not in LOOPBACK:
            log.warning(
                "the dashboard listens on %s, beyond this machine: anyone who reaches it sees the cluster%s",
                self.host,
                "" if self.guarded else " and can change it; set ROCKETSPARK_DASHBOARD_PASSWORD",
            )
        self._task = asyncio.get_running_loop().create_task(self._server.serve(), name="dashboard")
        while not self._server.started:
            if self._task.done():
                with contextlib.suppress(SystemExit):  # uvicorn's answer to a failed bind, after logging why
                    self._task.result()
                raise OSError(f"the dashboard could not listen on {self.host}:{self.port}")
            await asyncio.sleep(0.02)
        sockets = [s for server in self._server.servers for s in server.sockets]
        host, port = sockets[0].getsockname()[:2]
        return f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None


def boot_lines(address: str) -> list[str]:
    return [f"The dashboard boot success. listening on {address}", f"open http://{address}/"]
