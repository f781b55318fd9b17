"""docs/rocketmq5.md's Python examples run as written, with the official 5.x client in `.venv-rmq5`,
against `rocketspark dev` (its gRPC endpoint on a free port instead of 8081), one after another."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketspark.processes import ServerProcess
from tests.harness import dev_args, free_port
from tests.interop.v5.driver import V5_PYTHON, require_venv

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "rocketmq5.md").read_text(), re.S)
EXAMPLE_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("rocketmq5-docs")
    port = free_port()
    process = ServerProcess(
        "rocketspark.dev",
        dev_args(data, grpc_port=port),
        data / "dev.log",
    )
    process.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        process.stop()


def test_the_page_has_examples() -> None:
    assert len(EXAMPLES) == 3


@pytest.mark.parametrize("number", range(len(EXAMPLES)))
def test_example_runs(endpoint: str, number: int, tmp_path: Path) -> None:
    require_venv()
    script = tmp_path / "example.py"
    script.write_text(EXAMPLES[number].replace("127.0.0.1:8081", endpoint))
    done = subprocess.run(
        [str(V5_PYTHON), "-I", str(script)],
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"example {number} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    if number == 0:
        assert done.stdout.startswith("sent ")
    elif number == 1:  # the first example's tagged message, received and acked
        assert "created" in done.stdout and '{"id": 1}' in done.stdout
    else:  # a message of the first example, pushed to the listener
        assert "pushed" in done.stdout and "attempt 1" in done.stdout
