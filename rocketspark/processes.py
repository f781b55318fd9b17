"""Run a name server or broker as a child process on a free loopback port.

Each server prints a boot line on stdout naming the address it listens on; with `--port 0`
the OS picks a free port, so concurrent runs never collide. :class:`ServerProcess` waits for
that line with a deadline, checks that the port accepts connections, and always stops the
process: SIGTERM first, SIGKILL if it does not exit in time. Used by the tests, the jobs and
the benchmarks.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from rocketspark.protocol.body.route import TopicRouteData
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.namesrv import GetRouteInfoRequestHeader
from rocketspark.remoting.sync import SyncRemotingClient

_BOOT_LINE = re.compile(r"boot success\. listening on (\S+)")


class ServerProcess:
    """One `python -m <module> <args>` server, its stderr appended to `log_path`; or any `command`
    (named `module` in messages) that execs one, such as a shell running a documented command line,
    in `cwd` with `env` (default: this process's environment)."""

    def __init__(
        self,
        module: str,
        args: list[str],
        log_path: Path,
        *,
        command: list[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.module = module
        self.args = args
        self.log_path = log_path
        self.command = command
        self.env = env
        self.cwd = cwd
        self.address = ""
        #: the stdout lines read so far: up to the boot line after `start`, more after `read_until`
        self.output: list[str] = []
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError(f"{self.module} was not started")
        return self._process.pid

    def start(self, timeout_s: float = 30.0) -> str:
        """Start the process and return its address once it accepts connections."""
        self._lines = queue.Queue()
        self.output = []
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as log_file:
            self._process = subprocess.Popen(
                self.command or [sys.executable, "-m", self.module, *self.args],
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                env=dict(os.environ if self.env is None else self.env, PYTHONUNBUFFERED="1"),
                cwd=self.cwd,
            )
        # the queue is this process's own: a restarted server's previous pump may still be draining
        threading.Thread(target=self._pump_stdout, args=(self._process, self._lines), daemon=True).start()
        deadline = time.monotonic() + timeout_s
        self.address = _BOOT_LINE.findall(self.read_until(_BOOT_LINE, timeout_s, "booting")[-1])[0]
        self._wait_accepting(deadline)
        return self.address

    def read_until(self, pattern: re.Pattern[str], timeout_s: float = 30.0, waiting_for: str = "") -> list[str]:
        """The next stdout lines, up to the first that `pattern` finds something in (that one
        included); RuntimeError (the process stopped) when none comes within `timeout_s`, saying
        what it was `waiting_for` (default: that line)."""
        waiting_for = waiting_for or f"printing a line with {pattern.pattern!r}"
        if self._process is None:
            raise RuntimeError(f"{self.module} was not started")
        deadline = time.monotonic() + timeout_s
        lines: list[str] = []
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                self.stop()
                raise RuntimeError(
                    f"{self.module} did not finish {waiting_for} within {timeout_s} s:\n{self.log_tail()}"
                ) from None
            if line is None:
                code = self._process.wait()
                raise RuntimeError(f"{self.module} exited with code {code} before {waiting_for}:\n{self.log_tail()}")
            lines.append(line.rstrip("\n"))
            self.output.append(lines[-1])
            if pattern.search(line):
                return lines

    @staticmethod
    def _pump_stdout(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    def _wait_accepting(self, deadline: float) -> None:
        host, port = self.address.rsplit(":", 1)
        while True:
            try:
                with socket.create_connection((host, int(port)), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{self.module} at {self.address} does not accept connections") from None
                time.sleep(0.05)

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM and wait; SIGKILL after `timeout_s`. Returns the exit code."""
        if self._process is None:
            return None
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        return self._process.returncode

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to flush or unregister."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> Self:
        if not self.running():
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def namesrv_process(data_dir: Path, *extra_args: str) -> ServerProcess:
    """A name server on a free loopback port keeping its files in `data_dir` (not started)."""
    return ServerProcess("namesrv", ["--port", "0", "--data-dir", str(data_dir), *extra_args], data_dir / "namesrv.log")


def broker_process(data_dir: Path, namesrv: str, *extra_args: str, broker_name: str = "broker-a") -> ServerProcess:
    """A broker on a free loopback port registering with `namesrv`, storing under `data_dir` (not started)."""
    args = ["--port", "0", "--data-dir", str(data_dir), "--namesrv", namesrv, "--broker-name", broker_name, *extra_args]
    return ServerProcess("broker", args, data_dir / "broker.log")


#: every broker serves one of these system topics once it registered (SELF_TEST_TOPIC always)
REGISTRATION_PROBES = ("TBW102", "SELF_TEST_TOPIC")


def wait_registered(
    namesrv: str,
    broker: str,
    topics: tuple[str, ...] = REGISTRATION_PROBES,
    timeout_s: float = 15.0,
    **client_options: Any,
) -> None:
    """Block until the name server routes one of `topics` to `broker` (it registered them);
    `client_options` of the RemotingClient that asks (use_tls=True, for one)."""
    deadline = time.monotonic() + timeout_s
    with SyncRemotingClient(**client_options) as client:
        while True:
            for topic in topics:
                request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic))
                response = client.invoke(namesrv, request, timeout_s=5)
                if response.code == ResponseCode.SUCCESS:
                    route = TopicRouteData.from_json(response.body)
                    if any(b.master_address == broker for b in route.broker_datas):
                        return
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {broker} did not register {topics} with {namesrv} within {timeout_s} s")
            time.sleep(0.05)
