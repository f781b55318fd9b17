from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness import ServerFactory

BIN = Path(sys.executable).parent


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float


def cli_env(namesrv: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    env.update(COLUMNS="200", PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONUNBUFFERED="1")
    if namesrv:
        env["NAMESRV_ADDR"] = namesrv
    return env


def run_cli(
    *args: str, namesrv: str | None = None, stdin: str = "", timeout_s: float = 60, cwd: Path | None = None
) -> Result:
    """`python -m rocketspark.cli ARGS` in a subprocess (the real command, its real exit code)."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "rocketspark.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=cli_env(namesrv),
        timeout=timeout_s,
        cwd=cwd,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr, time.monotonic() - start)


@pytest.fixture
def cluster(servers: ServerFactory) -> str:
    """A name server with one broker; the name server's address."""
    namesrv = servers.namesrv()
    servers.broker(namesrv.address)
    return namesrv.address


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """The CLI sets the root logger's level; put it back for the tests that follow."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
