"""`pip install rocketspark` without the `spark` extra: a fresh virtualenv gets the client, the servers
and the CLI but no PySpark, and `rocketspark dev`, `produce` and `consume` work there; `demo` names
the extra. Slow: it makes a venv and installs into it (from pip's cache and the configured index)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import dev_args

ROOT = Path(__file__).resolve().parents[2]
#: what a wheel of the project is built from (a copy, so that the build leaves the worktree alone)
SOURCES = ("pyproject.toml", "README.md", "pyspark_rocketmq.py", "rocketspark", "namesrv", "broker")


def run(*command: str | Path, stdin: str = "", timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NAMESRV_ADDR", "PYTHONPATH", "VIRTUAL_ENV")}
    env["COLUMNS"] = "200"
    return subprocess.run(
        [str(part) for part in command],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=env,
    )


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ of a fresh venv holding rocketspark without its `spark` extra."""
    home = tmp_path_factory.mktemp("no-spark")
    source = home / "src"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    made = run(sys.executable, "-m", "venv", home / "venv", timeout_s=120)
    assert made.returncode == 0, made.stderr
    bin_dir = home / "venv" / "bin"
    installed = run(bin_dir / "python", "-m", "pip", "install", "--quiet", source, timeout_s=480)
    assert installed.returncode == 0, installed.stderr
    return bin_dir


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_cli_and_servers_work_without_pyspark(venv: Path, tmp_path: Path) -> None:
    assert "No module named 'pyspark'" in run(venv / "python", "-c", "import pyspark").stderr
    demo = run(venv / "rocketspark", "demo")
    assert demo.returncode == 1
    assert demo.stderr.strip() == (
        "error: rocketspark demo needs PySpark, which is not installed: pip install 'rocketspark[spark]'"
    )
    no_connector = run(venv / "python", "-c", "import rocketspark.spark")
    assert "MissingExtraError" in no_connector.stderr and "rocketspark[spark]" in no_connector.stderr

    dev = subprocess.Popen(
        [
            venv / "rocketspark",
            "dev",
            *dev_args(tmp_path / "data"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert dev.stdout is not None
        lines = [dev.stdout.readline().strip() for _ in range(4)]  # the data dir, two boot lines, the export
        assert lines[3].startswith("export NAMESRV_ADDR="), lines
        namesrv = lines[3].partition("=")[2]
        sent = run(venv / "rocketspark", "produce", "NoSpark", "-n", namesrv, stdin="hello without spark\n")
        assert (sent.returncode, sent.stdout) == (0, "sent 1 message to NoSpark\n"), sent.stderr
        read = run(venv / "rocketspark", "consume", "NoSpark", "-n", namesrv, "--offset", "earliest", "--max", "1")
        assert read.returncode == 0, read.stderr
        assert "hello without spark" in read.stdout
    finally:
        dev.send_signal(signal.SIGTERM)
        assert dev.wait(30) == 0
