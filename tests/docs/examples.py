"""The fenced examples of a docs page, and running them in order as a reader would
(`tests/docs/test_doc_examples.py`).

What a fence holds decides how it runs:

- `python` (or `py`): a script, in a fresh interpreter (this one's);
- `bash` (or `sh`, `shell`): a script, in `bash -e -o pipefail`. A line that starts a server
  (`rocketspark dev|namesrv|broker`, `python -m rocketspark.dev|namesrv|broker`, with or without
  a trailing `&`) runs as a long-lived server instead, in a shell of its own after the block's lines
  before it (a reader's second terminal); a block holding one holds nothing after its servers;
- `console`: each `$ ` line is a command (a server, as above, or run in bash) and the lines under it
  are its output, compared with what it prints (stdout, and stderr's `error:` lines) once times,
  addresses, message ids, table borders and column widths are set aside; `error:` expects exit 1;
- anything else (`text`, `yaml`, `properties`, no language) is output or a file's content and does
  not run.

An HTML comment right before a fence, which a reader does not see, says more:
`<!-- doc-test: file PATH -->` writes the block to PATH (it is that file's content), and
`<!-- doc-test: skip REASON -->` leaves a block that cannot run as written out, with the reason
(the test lists every such block).

Each page runs in a directory of its own (its HOME, and its working directory, which holds a `.venv`
that is this interpreter's), with its own servers: those its blocks start (a server block stops the
servers of earlier blocks, which would hold the same ports), or else a `rocketspark dev` the test
starts before its first block. Once a server runs, NAMESRV_ADDR holds its name server, as the
`export` line `rocketspark dev` prints says. Servers listen on free ports (their port flags are
set to 0), and every example has the servers' real addresses where it names the default ones;
`/etc/rocketspark` and `/var/lib/rocketspark` are directories of the page's.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rocketspark.processes import ServerProcess
from tests.harness import free_port

ROOT = Path(__file__).resolve().parents[2]
#: the default addresses the docs name, and directories of a real installation
NAMESRV_DEFAULT = "127.0.0.1:9876"
BROKER_DEFAULT = "127.0.0.1:10911"
SYSTEM_DIRS = ("/etc/rocketspark", "/var/lib/rocketspark")
#: a fence at the start of a line, with the doc-test comment on the line before it, if any
FENCE = re.compile(
    r"^(?:<!--\s*doc-test:\s*(?P<directive>\w+)\s+(?P<argument>.*?)\s*-->\n)?"
    r"```(?P<lang>[\w-]*)\n(?P<body>.*?)^```[ \t]*$",
    re.M | re.S,
)
PYTHON, SHELL, CONSOLE = ("python", "py"), ("bash", "sh", "shell"), ("console",)
#: a command line that starts a server: its program, its arguments, a trailing `&` and comment aside
SERVER = re.compile(
    r"^(?P<program>\S*rocketspark (?P<cli>dev|namesrv|broker)"
    r"|\S*python\S* -m (?P<module>rocketspark\.dev|namesrv|broker))"
    r"(?P<args>(?:\s+[^\s#&]\S*)*)\s*&?\s*(?:#.*)?$"
)
#: what a server's kind gets so that it listens on free ports (0: the server picks one)
FREE_PORTS = {
    "dev": ["--namesrv-port", "0", "--broker-port", "0"],
    "namesrv": ["--port", "0"],
    "broker": ["--port", "0"],
}
#: the ports `rocketspark dev` opens by default where 0 means off, not a free port
DEV_OPTIONAL_PORTS = ("--grpc-port", "--dashboard-port")


def free_ports(kind: str, args: str) -> list[str]:
    """The flags that move a server of `kind` started with `args` onto free ports: a dev's gRPC
    endpoint and dashboard stay as the page has them (off with 0, else on a free port)."""
    flags = list(FREE_PORTS[kind])
    if kind == "dev":
        given = shlex.split(args)
        for flag in DEV_OPTIONAL_PORTS:
            off = flag in given and given[given.index(flag) + 1 : given.index(flag) + 2] == ["0"]
            flags += [flag, "0" if off else str(free_port())]
    return flags


EXPORT_LINE = re.compile(r"^export NAMESRV_ADDR=")
BROKER_BOOT = re.compile(r"The broker\[[^,]+, (\S+)\] boot success")
HEX_ID = re.compile(r"\b[0-9A-F]{32}\b")
NORMALIZE = (
    (re.compile(r"[\u2500-\u257f]"), " "),  # table borders
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}(?:[+-]\d\d:\d\d|Z)?"), "<time>"),
    (re.compile(r"\d+\.\d+\.\d+\.\d+:\d+"), "<address>"),
    (HEX_ID, "<id>"),
    (re.compile(r"\b\d{13}\b"), "<ms>"),
    (re.compile(r"\s+"), " "),
)
#: the topics a Python example names: in a Message, a subscribe, a send_arrow or a Spark "topic" option
TOPIC_NAMES = re.compile(r"""(?:Message\(|subscribe\(|send_arrow\([^,()]+,\s*|\.option\("topic",\s*)"([^"]+)\"""")
#: deadlines: a Python example (the Spark ones start a JVM), a shell block, one console command
PYTHON_TIMEOUT_S = 240
SHELL_TIMEOUT_S = 120
COMMAND_TIMEOUT_S = 60


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    body: str
    directive: str | None = None  # "file" or "skip"
    argument: str = ""

    @property
    def id(self) -> str:
        return f"{Path(self.page).name}:{self.line}"

    @property
    def runs(self) -> bool:
        """Whether the test has something to do with it (run it, write it, or say why it does not)."""
        return self.directive is not None or self.lang in (*PYTHON, *SHELL, *CONSOLE)

    @property
    def starts_spark(self) -> bool:
        return self.lang in PYTHON and ("local_session(" in self.body or "SparkSession" in self.body)

    @property
    def starts_servers(self) -> bool:
        if self.lang in SHELL:
            return any(SERVER.match(line.strip()) for line in logical_lines(self.body))
        if self.lang in CONSOLE:
            return any(SERVER.match(line[2:].strip()) for line in self.body.splitlines() if line.startswith("$ "))
        return False


def blocks(page: str) -> list[Block]:
    """Every fenced block of `page` (a path under the repository), in order."""
    text = (ROOT / page).read_text()
    return [
        Block(
            page,
            text.count("\n", 0, found.start("lang")) + 1,
            found["lang"],
            found["body"],
            found["directive"],
            found["argument"] or "",
        )
        for found in FENCE.finditer(text)
    ]


def logical_lines(script: str) -> list[str]:
    """The lines of a shell script, each continued line (ending in a backslash) joined to the next."""
    return re.sub(r"[ \t]*\\\n\s*", " ", script).splitlines()


def may_start_early(code: str, named_before: set[str]) -> bool:
    """Whether a Python example may run beside the examples that named `named_before`: it names its
    topics (and no pattern or list of them), none of those."""
    found = set(TOPIC_NAMES.findall(code))
    return bool(found) and not found & named_before and "topicPattern" not in code and '"topics"' not in code


def console_steps(body: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


def normalize(lines: list[str]) -> list[str]:
    result = []
    for line in lines:
        text = line
        for pattern, replacement in NORMALIZE:
            text = pattern.sub(replacement, text)
        if text.strip():
            result.append(text.strip())
    return result


@dataclass
class Run:
    """A Python example's process; its stdout and stderr go to files (a run started ahead of its
    test has no reader)."""

    process: subprocess.Popen[bytes]
    home: Path
    deadline: float

    def output(self) -> str:
        return "\n".join((self.home / name).read_text(errors="replace") for name in ("stdout", "stderr"))


@dataclass
class PageRun:
    """One page's directory, servers and runs."""

    page: str
    base: Path
    servers: list[ServerProcess] = field(default_factory=list)
    namesrv: str = ""
    broker: str = ""
    ids: dict[str, str] = field(default_factory=dict)  # message ids in the doc -> those of this run
    python_runs: dict[int, Run] = field(default_factory=dict)  # by the block's line
    _server_count: int = 0

    def __post_init__(self) -> None:
        self.home.mkdir(parents=True)
        self.cwd.mkdir(parents=True)
        (self.cwd / ".venv").symlink_to(sys.prefix)

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def cwd(self) -> Path:
        return self.base / "work"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR" and not k.startswith("ROCKETMQ_")}
        bin_dir = str(Path(sys.executable).parent)
        env.update(HOME=str(self.home), PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", COLUMNS="200")
        env["PYTHONUNBUFFERED"] = "1"
        if self.namesrv:
            env["NAMESRV_ADDR"] = self.namesrv
        return env

    def rewrite(self, text: str) -> str:
        """`text` with this page's addresses and directories for the default ones."""
        if self.namesrv:
            text = text.replace(NAMESRV_DEFAULT, self.namesrv)
        if self.broker:
            text = text.replace(BROKER_DEFAULT, self.broker)
        for directory in SYSTEM_DIRS:
            text = text.replace(directory, str(self.base) + directory)
        for doc_id, real_id in self.ids.items():
            text = text.replace(doc_id, real_id)
        return text

    # -- servers ---------------------------------------------------------------------------------

    def start_default_servers(self) -> None:
        """`rocketspark dev`, for a page whose blocks start no server."""
        self.start_server("rocketspark dev", setup="")

    def stop_servers(self) -> None:
        for server in reversed(self.servers):
            server.stop()
        self.servers.clear()

    def start_server(self, line: str, setup: str) -> ServerProcess:
        """The server of a documented command `line`, on free ports, in a shell that ran `setup`
        first; its boot lines (and a dev's `export` line) are in its `output`."""
        found = SERVER.match(line.strip())
        assert found, line
        kind = found["cli"] or found["module"].rsplit(".", 1)[-1]
        command = self.rewrite(f"{found['program']}{found['args']}") + " " + shlex.join(free_ports(kind, found["args"]))
        self._server_count += 1
        server = ServerProcess(
            line,
            [],
            self.base / f"server-{self._server_count}.log",
            command=["bash", "-c", f"{self.rewrite(setup)}\nexec {command}"],
            env=self.env(),
            cwd=self.cwd,
        )
        self.servers.append(server)
        server.start()
        if kind == "dev":
            self.namesrv = server.address
            self.broker = BROKER_BOOT.findall("\n".join(server.read_until(EXPORT_LINE, waiting_for="booting")))[0]
        elif kind == "namesrv":
            self.namesrv = server.address
        else:
            self.broker = server.address
        return server

    # -- blocks ----------------------------------------------------------------------------------

    def write_file(self, block: Block) -> None:
        path = Path(self.rewrite(block.argument))
        target = path if path.is_absolute() else self.cwd / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.rewrite(block.body))

    def run_shell(self, block: Block) -> None:
        lines = logical_lines(block.body)
        servers = [i for i, line in enumerate(lines) if SERVER.match(line.strip())]
        if not servers:
            self._bash(block.body, SHELL_TIMEOUT_S, block)
            return
        assert not any(line.strip() for line in lines[servers[-1] + 1 :]), f"{block.id}: lines after a server"
        self.stop_servers()
        for index in servers:
            setup = "\n".join(line for i, line in enumerate(lines[:index]) if i not in servers)
            self.start_server(lines[index], setup)

    def run_console(self, block: Block) -> None:
        started = False
        for doc_command, expected in console_steps(block.body):
            if SERVER.match(doc_command.strip()):
                if not started:
                    self.stop_servers()
                    started = True
                server = self.start_server(doc_command, setup="")
                actual = [line.replace(str(self.home), "/home/me") for line in server.output]
                assert normalize(actual) == normalize(expected), f"{block.id}: {doc_command}\n{server.output}"
                continue
            done = self._bash(doc_command, COMMAND_TIMEOUT_S, block, check=False)
            errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
            context = f"{block.id}: {self.rewrite(doc_command)}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
            assert done.returncode == (1 if any(line.startswith("error:") for line in expected) else 0), context
            assert normalize(done.stdout.splitlines() + errors) == normalize(expected), context
            for doc_id, real_id in zip(HEX_ID.findall("\n".join(expected)), HEX_ID.findall(done.stdout), strict=False):
                self.ids.setdefault(doc_id, real_id)

    def _bash(
        self, script: str, timeout_s: float, block: Block, *, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", self.rewrite(script)],
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=self.cwd,
            timeout=timeout_s,
            check=False,
        )
        if check:
            assert done.returncode == 0, (
                f"{block.id}: exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
            )
        return done

    def start_python(self, block: Block) -> None:
        home = self.base / f"python-{block.line}"
        home.mkdir()
        script = home / "example.py"
        script.write_text(self.rewrite(block.body))
        with (home / "stdout").open("wb") as out, (home / "stderr").open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, str(script)], stdout=out, stderr=err, env=self.env(), cwd=self.cwd
            )
        self.python_runs[block.line] = Run(process, home, time.monotonic() + PYTHON_TIMEOUT_S)

    def finish_python(self, block: Block) -> Run:
        """The block's run, once it ended within its deadline (started now unless it runs already)."""
        if block.line not in self.python_runs:
            self.start_python(block)
        run = self.python_runs[block.line]
        try:
            run.process.wait(timeout=max(run.deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            run.process.kill()
            run.process.wait()
            raise AssertionError(f"{block.id} did not finish within {PYTHON_TIMEOUT_S} s\n{run.output()}") from None
        return run

    def close(self) -> None:
        for run in self.python_runs.values():
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait()
        self.stop_servers()
