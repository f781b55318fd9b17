"""Spark jobs run in a child process of their own, with a deadline and nothing left behind.

A process holds one SparkContext: a job that needs a Spark of its own (a `local-cluster` master, a
long soak) runs as a script in its own process group, beside the tests' shared session, and prints
its result as one `RESULT <json>` line. On the deadline the whole group is killed (its driver JVM and
any executor JVMs it started; their Python daemons end with their JVM).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

RESULT_PREFIX = "RESULT "


def run_in_own_group(
    command: list[str], *, env: dict[str, str], timeout_s: float, cwd: Path | None = None, stderr: IO[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `command` in a process group of its own, and kill the whole group (a driver JVM and any
    executor JVMs it started) once it ended or at the deadline: then its return code is -9. Its
    stderr goes to `stderr` when given, else it is returned."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=stderr if stderr is not None else subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        stdout, errors = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stdout, errors = "", ""
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    if process.returncode is None:  # timed out: collect what it wrote before the kill
        stdout, errors = process.communicate(timeout=30)
    return subprocess.CompletedProcess(command, process.returncode, stdout or "", errors or "")


def run_child(script: Path, args: list[str], log: Path, timeout_s: float) -> dict[str, Any]:
    """Run `script args` with this interpreter; its last RESULT line, decoded. Fails the test with
    the tail of its stderr (kept in `log`) when it fails, times out or prints no result."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    with log.open("w") as stderr:
        finished = run_in_own_group([sys.executable, str(script), *args], env=env, timeout_s=timeout_s, stderr=stderr)
    tail = "\n".join(log.read_text().splitlines()[-40:])
    assert finished.returncode == 0, f"{script.name} failed ({finished.returncode}):\n{tail}"
    lines = [line for line in finished.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    assert lines, f"{script.name} printed no result:\n{finished.stdout}\n{tail}"
    return json.loads(lines[-1].removeprefix(RESULT_PREFIX))
