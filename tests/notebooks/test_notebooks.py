"""The notebooks in notebooks/ run headless, cell by cell, against real servers; they are committed clean."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
NOTEBOOK_TIMEOUT_S = 2 * CELL_TIMEOUT_S
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


def write_kernelspec(jupyter_dir: Path) -> str:
    """A kernelspec that runs ipykernel in this interpreter (the venv), whatever kernels the user has."""
    spec_dir = jupyter_dir / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "rocketspark tests",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
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


@dataclass
class NotebookRun:
    """One notebook executed in a thread of its own, with its kernel's temp dirs under `kernel_tmp`."""

    notebook: Any
    kernel_tmp: Path
    thread: threading.Thread
    error: BaseException | None = None
    leftovers: list[int] = field(default_factory=list)

    def kill_kernel(self) -> list[int]:
        """Kill the processes the notebook started (its kernel, the kernel's JVM, its servers)."""
        found = processes_naming(str(self.kernel_tmp))
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return found


class NotebookRuns:
    """Runs the notebooks side by side: each starts a kernel and a Spark JVM, for the better part of a
    minute mostly on one core. The first test that asks starts every notebook selected; each test
    then waits for its own (with a deadline) and checks it."""

    def __init__(self, paths: list[Path], kernel_name: str, servers: ServerFactory, base_dir: Path) -> None:
        self.paths = paths
        self.kernel_name = kernel_name
        self.servers = servers
        self.base_dir = base_dir
        self.runs: dict[Path, NotebookRun] = {}

    def _start(self, path: Path) -> None:
        # the notebook's temp dirs (and its own servers' data dirs) go under kernel_tmp, so that any
        # process it leaves behind can be found by its command line
        work_dir = self.base_dir / path.stem
        kernel_tmp = work_dir / "kernel-tmp"
        kernel_tmp.mkdir(parents=True)
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", TMPDIR=str(kernel_tmp))
        env.pop("NAMESRV_ADDR", None)
        if path.name not in OWN_SERVERS:
            namesrv = self.servers.namesrv()
            self.servers.broker(namesrv.address)
            env["NAMESRV_ADDR"] = namesrv.address
        notebook = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(
            notebook,
            timeout=CELL_TIMEOUT_S,
            kernel_name=self.kernel_name,
            resources={"metadata": {"path": str(work_dir)}},  # the kernel's working directory
        )

        def execute() -> None:
            try:
                client.execute(env=env)
            except BaseException as exc:  # the test raises it
                run.error = exc
            finally:
                run.leftovers = run.kill_kernel()

        run = NotebookRun(notebook, kernel_tmp, threading.Thread(target=execute, name=f"notebook {path.name}"))
        self.runs[path] = run
        run.thread.start()

    def finished(self, path: Path) -> NotebookRun:
        if not self.runs:
            for each in self.paths:
                self._start(each)
        if path not in self.runs:
            self._start(path)
        run = self.runs[path]
        run.thread.join(NOTEBOOK_TIMEOUT_S)
        if run.thread.is_alive():
            run.kill_kernel()  # the client then gives up on the dead kernel
            run.thread.join(60)
            raise AssertionError(f"{path.name} did not finish within {NOTEBOOK_TIMEOUT_S} s")
        return run

    def stop_all(self) -> None:
        for run in self.runs.values():
            if run.thread.is_alive():
                run.kill_kernel()
                run.thread.join(60)


@pytest.fixture(scope="module")
def notebook_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NotebookRuns]:
    """The notebooks of the tests selected in this module; servers for those that need them."""
    selected = [
        item.callspec.params["path"]
        for item in request.session.items
        if item.module is request.module and item.originalname == "test_notebook_runs"
    ]
    base_dir = tmp_path_factory.mktemp("notebooks")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("JUPYTER_PATH", str(base_dir / "jupyter"))
        kernel_name = write_kernelspec(base_dir / "jupyter")
        servers = ServerFactory(base_dir / "servers")
        runs = NotebookRuns(selected, kernel_name, servers, base_dir)
        try:
            yield runs
        finally:
            try:
                runs.stop_all()
            finally:
                servers.stop_all()


@pytest.mark.slow
@pytest.mark.timeout(NOTEBOOK_TIMEOUT_S + 120)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_runs(path: Path, notebook_runs: NotebookRuns) -> None:
    run = notebook_runs.finished(path)
    if run.error is not None:
        raise run.error
    assert not run.leftovers, f"{path.name} left processes {run.leftovers} behind"
    outputs = [output for cell in run.notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    if path.name == "explore_topic.ipynb":
        assert any("image/png" in output.get("data", {}) for output in outputs), "no plot shown"
