"""`rocketspark dev`, `namesrv` and `broker` run the real servers (their own flag parsers)."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rocketspark.processes import ServerProcess, wait_registered
from tests.cli.conftest import cli_env, run_cli
from tests.harness import dev_args, free_port


def test_namesrv_and_broker_commands(tmp_path: Path) -> None:
    namesrv = ServerProcess(
        "rocketspark.cli", ["namesrv", "--port", "0", "--data-dir", str(tmp_path / "ns")], tmp_path / "ns.log"
    )
    with namesrv:
        broker = ServerProcess(
            "rocketspark.cli",
            ["broker", "--port", "0", "--namesrv", namesrv.address, "--data-dir", str(tmp_path / "store")],
            tmp_path / "broker.log",
        )
        with broker:
            wait_registered(namesrv.address, broker.address)
            result = run_cli("topic", "create", "Served", "--queues", "2", "--namesrv", namesrv.address)
            assert (result.code, result.out) == (
                0,
                f"created topic Served with 2 queues on broker-a ({broker.address})\n",
            )
        assert broker.stop() == 0
    assert namesrv.stop() == 0


def test_server_flags_are_their_modules(tmp_path: Path) -> None:
    helped = run_cli("broker", "--help")
    assert helped.code == 0 and "--set KEY=VALUE" in helped.out
    through_cli = run_cli("namesrv", "--help").out
    command = [sys.executable, "-m", "namesrv", "--help"]
    module = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True, env=cli_env()).stdout
    assert through_cli.startswith("usage: rocketspark namesrv ") and module.startswith("usage: python -m namesrv ")
    assert through_cli.partition("\noptions:")[2] == module.partition("\noptions:")[2] != ""
    bad = run_cli("namesrv", "--bogus")
    assert bad.code == 2 and "unrecognized arguments: --bogus" in bad.err
    assert run_cli("dev", "--flush", "never").code == 2
    dev_help = run_cli("dev", "--help").out
    assert "--grpc-port PORT" in dev_help and "(default: 8081)" in " ".join(dev_help.split())


def _lines(process: subprocess.Popen[str], count: int, timeout_s: float) -> list[str]:
    found: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout
    threading.Thread(target=lambda: [found.put(line) for line in stdout], daemon=True).start()
    deadline = time.monotonic() + timeout_s
    lines: list[str] = []
    while len(lines) < count:
        try:
            lines.append(found.get(timeout=max(0.01, deadline - time.monotonic())).rstrip("\n"))
        except queue.Empty:
            pytest.fail(f"rocketspark dev printed {lines} within {timeout_s} s")
    return lines


def test_dev_prints_addresses_and_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    grpc_port = free_port()  # never the default 8081 in tests
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rocketspark.cli",
            "dev",
            *dev_args(data, grpc_port=grpc_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=cli_env(),
    )
    try:
        lines = _lines(process, 5, 30)
        assert lines[0] == f"data dir: {data.resolve()}"
        assert lines[1].startswith("The Name Server boot success. listening on 127.0.0.1:")
        namesrv = lines[1].rsplit(" ", 1)[1]
        assert lines[2] == f"The gRPC endpoint for RocketMQ 5.x clients is at 127.0.0.1:{grpc_port}"
        assert lines[3].startswith("The broker[broker-a, 127.0.0.1:")
        assert lines[4] == f"export NAMESRV_ADDR={namesrv}"
        listed = run_cli("topic", "list", "--namesrv", namesrv)
        assert (listed.code, listed.out) == (0, "no topics\n")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    assert (data / "store").is_dir()
