"""Every Python example of the README and the docs runs against a real name server and broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rocketspark.processes import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/client.md", "docs/getting-started.md", "docs/spark.md")
EXAMPLES = [
    pytest.param(code, id=f"{Path(name).name}-{i}")
    for name in DOCS
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", (ROOT / name).read_text(), re.S))
]


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory):
    data = tmp_path_factory.mktemp("doc-cluster")
    process = ServerProcess(
        "rocketspark.dev", ["--namesrv-port", "0", "--broker-port", "0", "--data-dir", str(data)], data / "dev.log"
    )
    process.start()
    try:
        yield process.address
    finally:
        process.stop()


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_runs(namesrv: str, example: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(example.replace("127.0.0.1:9876", namesrv))
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=240,  # the Spark examples start a JVM
        check=False,
        env=dict(os.environ, HOME=str(tmp_path)),
        cwd=ROOT,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
