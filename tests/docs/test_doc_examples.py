"""Every Python example of the README and the docs runs against a real name server and broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocketspark.processes import ServerProcess
from tests.harness import dev_args

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/client.md", "docs/getting-started.md", "docs/spark.md")
#: (id, code) of every example, in the order of the docs
CODE = [
    (f"{Path(name).name}-{i}", code)
    for name in DOCS
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", (ROOT / name).read_text(), re.S))
]
EXAMPLES = [pytest.param(example_id, id=example_id) for example_id, _ in CODE]
#: an example's deadline (the Spark examples start a JVM)
EXAMPLE_TIMEOUT_S = 240
#: the topics an example names: in a Message, a subscribe, a send_arrow or a Spark "topic" option
TOPIC = re.compile(r"""(?:Message\(|subscribe\(|send_arrow\([^,()]+,\s*|\.option\("topic",\s*)"([^"]+)\"""")


def starts_spark(code: str) -> bool:
    return "local_session(" in code or "SparkSession" in code


def topics(code: str) -> set[str]:
    return set(TOPIC.findall(code))


def may_start_early(code: str, named_before: set[str]) -> bool:
    """Whether an example may run beside the examples that named `named_before`: it names its topics
    (and no pattern or list of them), none of those."""
    found = topics(code)
    return bool(found) and not found & named_before and "topicPattern" not in code and '"topics"' not in code


@dataclass
class Run:
    process: subprocess.Popen[bytes]
    home: Path  # holds its stdout and stderr (files: a run ahead of its test has no reader)
    deadline: float

    def output(self) -> str:
        return "\n".join((self.home / name).read_text(errors="replace") for name in ("stdout", "stderr"))


class ExampleRuns:
    """Runs each example as a script in a process of its own, as a reader of the docs would.

    A Spark example boots a JVM for tens of seconds, mostly on one core. So when one starts, the next
    Spark example starts with it, ahead of its test, and the two boot side by side; unless that one
    names a topic of an example before it (it may read what that one writes: it then starts in its
    own test, after them). Each test still waits for its own example and checks its exit code; every
    run has its deadline from its start, and runs left over are killed at the end of the module."""

    def __init__(self, namesrv: str, base_dir: Path) -> None:
        self.namesrv = namesrv
        self.base_dir = base_dir
        self.runs: dict[str, Run] = {}

    def _start(self, example_id: str) -> None:
        code = dict(CODE)[example_id]
        home = self.base_dir / example_id
        home.mkdir()
        script = home / "example.py"
        script.write_text(code.replace("127.0.0.1:9876", self.namesrv))
        with (home / "stdout").open("wb") as out, (home / "stderr").open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, str(script)], stdout=out, stderr=err, env=dict(os.environ, HOME=str(home)), cwd=ROOT
            )
        self.runs[example_id] = Run(process, home, time.monotonic() + EXAMPLE_TIMEOUT_S)

    def _start_next_spark_example(self, example_id: str) -> None:
        ids = [i for i, _ in CODE]
        named: set[str] = set()
        for next_id, code in CODE[ids.index(example_id) :]:
            if next_id != example_id and starts_spark(code):
                if next_id not in self.runs and may_start_early(code, named):
                    self._start(next_id)
                return
            named |= topics(code)

    def finished(self, example_id: str) -> Run:
        """The example's run, once it ended (within its deadline)."""
        if example_id not in self.runs:
            self._start(example_id)
        if starts_spark(dict(CODE)[example_id]):
            self._start_next_spark_example(example_id)
        run = self.runs[example_id]
        try:
            run.process.wait(timeout=max(run.deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            run.process.kill()
            run.process.wait()
            raise AssertionError(f"{example_id} did not finish within {EXAMPLE_TIMEOUT_S} s\n{run.output()}") from None
        return run

    def kill_all(self) -> None:
        for run in self.runs.values():
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait()


def test_an_example_that_reads_a_topic_named_before_it_does_not_start_early() -> None:
    """What decides which Spark examples run side by side."""
    writes = 'producer.send_arrow(table, "Events")\nconsumer.subscribe("Orders", "a || b")'
    assert topics(writes) == {"Events", "Orders"}
    reads = 'spark.read.format("rocketmq").option("topic", "Events").load()'
    assert not may_start_early(reads, topics(writes))
    assert may_start_early(reads, {"Orders"})
    assert not may_start_early('spark.read.format("rocketmq").option("topicPattern", "E.*").load()', set())
    assert not may_start_early("spark.range(3).count()", set())  # names no topic: may read any


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("doc-cluster")
    process = ServerProcess(
        "rocketspark.dev",
        dev_args(data),
        data / "dev.log",
    )
    process.start()
    try:
        yield process.address
    finally:
        process.stop()


@pytest.fixture(scope="module")
def example_runs(namesrv: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleRuns]:
    runs = ExampleRuns(namesrv, tmp_path_factory.mktemp("doc-examples"))
    try:
        yield runs
    finally:
        runs.kill_all()


@pytest.mark.slow  # several run Spark in a process of their own
@pytest.mark.parametrize("example_id", EXAMPLES)
def test_example_runs(example_runs: ExampleRuns, example_id: str) -> None:
    run = example_runs.finished(example_id)
    assert run.process.returncode == 0, run.output()
