"""The notebooks in notebooks/ run headless, cell by cell, against real servers; they are committed clean."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="pip install -e '.[notebooks]'")
nbclient = pytest.importorskip("nbclient", reason="pip install -e '.[notebooks]'")

from tests.harness import ServerFactory  # noqa: E402 - after the skips above

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: these start a name server and a broker of their own (NAMESRV_ADDR unset); the others get the test's
OWN_SERVERS = {"explore_topic.ipynb"}
#: each cell may start Spark or run a Spark job; the whole notebook takes well under a minute
CELL_TIMEOUT_S = 300
KERNEL = "rocketspark-notebook-tests"


def test_notebooks_are_committed_without_outputs() -> None:
    assert {path.name for path in NOTEBOOKS} >= {"explore_topic.ipynb", "stream_to_parquet.ipynb"}
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        for index, cell in enumerate(notebook.cells):
            where = f"{path.name} cell {index}"
            assert "execution" not in cell.metadata, f"{where} has execution timings"
            if cell.cell_type == "code":
                assert cell.outputs == [], f"{where} has outputs"
                assert cell.execution_count is None, f"{where} has an execution count"


@pytest.fixture
def kernel_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernelspec that runs ipykernel in this interpreter (the venv), whatever kernels the user has."""
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "rocketspark tests",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return KERNEL


def processes_naming(text: str) -> list[int]:
    """Ids of this machine's processes whose command line contains `text`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                pids.append(int(entry.name))
    return pids


@pytest.mark.slow
@pytest.mark.timeout(2 * CELL_TIMEOUT_S + 60)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_runs(path: Path, kernel_name: str, servers: ServerFactory, tmp_path: Path) -> None:
    # the notebook's temp dirs (and its own servers' data dirs) go under kernel_tmp, so that any
    # process it leaves behind can be found by its command line
    kernel_tmp = tmp_path / "kernel-tmp"
    kernel_tmp.mkdir()
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", TMPDIR=str(kernel_tmp))
    env.pop("NAMESRV_ADDR", None)
    if path.name not in OWN_SERVERS:
        namesrv = servers.namesrv()
        servers.broker(namesrv.address)
        env["NAMESRV_ADDR"] = namesrv.address
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(tmp_path)}},  # the kernel's working directory
    )
    try:
        client.execute(env=env)
    finally:
        leftovers = processes_naming(str(kernel_tmp))
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert not leftovers, f"{path.name} left processes {leftovers} behind"
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    if path.name == "explore_topic.ipynb":
        assert any("image/png" in output.get("data", {}) for output in outputs), "no plot shown"
