"""The pytest side of the real-client tests: runs :mod:`tests.interop.real_client` in subprocesses.

Every run has a hard deadline and its own `HOME` (the C++ client logs to `$HOME/logs/rocketmq-cpp/`).
:meth:`RealClient.diagnostics` gathers what explains a failure: the tails of the name server's and
broker's logs, each client run's stderr and the tail of its C++ log.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rocketspark.processes import ServerProcess
from tests.interop.real_client import SHUTDOWN_ABORT

REPO_ROOT = Path(__file__).resolve().parents[2]
#: time a client subprocess gets beyond what its command waits for: start-up, route lookups, shutdown
CLIENT_OVERHEAD_S = 30.0

_run_numbers = itertools.count()


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    topic: str
    body: str  # the client takes a C string: no NUL
    tags: str | None = None
    keys: str | None = None
    properties: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Send:
    """One call of the producer API: `batch` sends all `messages` in one request, the rest one each."""

    method: str  # "sync", "batch", "orderly" or "oneway"
    messages: list[OutgoingMessage]
    arg: int = 0  # orderly: the hashing selector picks queue `arg % queue count`


@dataclass(frozen=True, slots=True)
class SendOutcome:
    status: str | None = None  # SendStatus name; None for oneway sends and errors
    msg_id: str = ""
    offset: int = -1
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Received:
    """A message as the real client's push consumer handed it to the callback."""

    topic: str
    tags: str | None
    keys: str | None
    body: str
    id: str
    queue_id: int
    queue_offset: int
    reconsume_times: int
    properties: dict[str, str | None]


@dataclass(frozen=True, slots=True)
class Consumed:
    messages: list[Received]
    expected_reached: bool  # False: the consumer gave up after max_wait_s

    def per_queue(self) -> dict[int, list[int]]:
        """Queue offsets per queue id, in the order the callback saw them."""
        result: dict[int, list[int]] = {}
        for message in self.messages:
            result.setdefault(message.queue_id, []).append(message.queue_offset)
        return result


class ClientRun:
    """One `python -m tests.interop.real_client` subprocess; its arguments go in a JSON file in `home`."""

    def __init__(self, command: str, args: dict[str, Any], home: Path, timeout_s: float) -> None:
        self.command = command
        self.timeout_s = timeout_s
        self.stderr = ""
        self.problem: str | None = None
        args_file = home / f"{command}-{next(_run_numbers)}.json"
        args_file.write_text(json.dumps(args))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.interop.real_client", command, str(args_file)],
            cwd=REPO_ROOT,
            env=dict(os.environ, HOME=str(home)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log_path = home / "logs" / "rocketmq-cpp" / f"{self.process.pid}_rocketmq-cpp.log.0"

    def wait(self) -> dict[str, Any] | None:
        """The command's JSON result, or None with `problem` saying why there is none."""
        try:
            stdout, self.stderr = self.process.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, self.stderr = self.process.communicate()
            self.problem = f"the real client's {self.command} did not finish within {self.timeout_s:.0f} s"
            return None
        aborted_in_shutdown = self.process.returncode == -signal.SIGABRT and SHUTDOWN_ABORT in self.stderr
        if self.process.returncode != 0 and not (aborted_in_shutdown and stdout.strip()):
            self.problem = f"the real client's {self.command} exited with code {self.process.returncode}"
            return None
        try:
            result: dict[str, Any] = json.loads(stdout)
        except ValueError:
            self.problem = f"the real client's {self.command} printed no JSON result: {stdout[-2000:]!r}"
            return None
        return result

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            _, self.stderr = self.process.communicate()

    def report(self, lines: int = 40) -> str:
        try:
            log_tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            log_tail = "(no log)"
        return (
            f"--- real client {self.command} (pid {self.process.pid}) stderr:\n{self.stderr[-4000:]}\n"
            f"--- its log {self.log_path.name}:\n{log_tail}"
        )


class RealClient:
    """Runs real-client commands against one name server; see the module docstring."""

    def __init__(
        self, namesrv: str, home: Path, servers: Sequence[ServerProcess], credentials: dict[str, str] | None = None
    ) -> None:
        """`credentials`: `access_key`, `secret_key`, `channel` for `set_session_credentials`; None: unsigned."""
        self.namesrv = namesrv
        self.credentials = credentials
        self.home = home
        self.servers = servers
        self.runs: list[ClientRun] = []

    def close(self) -> None:
        """Kill the runs still going (a test that failed early did not wait for them)."""
        for run in self.runs:
            run.kill()

    def diagnostics(self) -> str:
        parts = [f"--- {server.module} {server.address} log:\n{server.log_tail()}" for server in self.servers]
        parts.extend(run.report() for run in self.runs)
        return "\n".join(parts)

    def _start(self, command: str, args: dict[str, Any], timeout_s: float) -> ClientRun:
        run_args = {"namesrv": self.namesrv, "credentials": self.credentials, **args}
        run = ClientRun(command, run_args, self.home, timeout_s)
        self.runs.append(run)
        return run

    def _result(self, run: ClientRun) -> dict[str, Any]:
        result = run.wait()
        if result is None:
            raise AssertionError(f"{run.problem}\n{self.diagnostics()}")
        return result

    def produce(self, group: str, sends: Iterable[Send], timeout_s: float = 60.0) -> list[SendOutcome]:
        """Send with one producer of group `group`; one outcome per request, in order."""
        run = self._start("produce", {"group": group, "sends": [asdict(send) for send in sends]}, timeout_s)
        return [SendOutcome(**outcome) for outcome in self._result(run)["results"]]

    def start_consumer(
        self,
        group: str,
        topic: str,
        *,
        expect: int,
        expression: str = "*",
        orderly: bool = False,
        broadcasting: bool = False,
        settle_s: float = 1.0,
        max_wait_s: float = 20.0,
        properties: Sequence[str] = (),
        fail_times: int = 0,
    ) -> ClientRun:
        """Start a push consumer that stops `settle_s` after receiving `expect` messages (see
        `real_client.consume`); :meth:`consumed` waits for it."""
        args = {
            "group": group,
            "topic": topic,
            "expression": expression,
            "orderly": orderly,
            "broadcasting": broadcasting,
            "expect": expect,
            "settle_s": settle_s,
            "max_wait_s": max_wait_s,
            "properties": list(properties),
            "fail_times": fail_times,
        }
        return self._start("consume", args, max_wait_s + settle_s + CLIENT_OVERHEAD_S)

    def consumed(self, run: ClientRun) -> Consumed:
        result = self._result(run)
        return Consumed([Received(**message) for message in result["messages"]], result["expected_reached"])

    def consume(self, group: str, topic: str, *, expect: int, **options: Any) -> Consumed:
        """Run one push consumer to the end; options as for :meth:`start_consumer`."""
        return self.consumed(self.start_consumer(group, topic, expect=expect, **options))
