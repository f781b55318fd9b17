"""The `rocketspark` command against a real name server and broker: outputs, exit codes 0/1/2 and
one-line errors. Most tests call `rocketspark.cli.main(argv)` in-process (the code path of the console
script); the ones about the process itself (exit codes, stderr, time to fail) run it as a subprocess."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

from rocketspark.cli import main
from rocketspark.cli.consume import parse_since
from tests.cli.conftest import BIN, run_cli


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.fixture(autouse=True)
def _no_namesrv_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    monkeypatch.setenv("COLUMNS", "200")


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["topic"],
        ["topic", "create"],
        ["topic", "list"],
        ["topic", "describe"],
        ["topic", "delete"],
        ["produce"],
        ["consume"],
        ["message", "show"],
        ["group", "progress"],
        ["demo"],
    ],
)
def test_help_everywhere(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    code, out, _ = cli(capsys, *args, "--help")
    assert code == 0
    assert "Usage: rocketspark" in out
    if args and args[-1] not in ("topic",):
        assert "--namesrv" in out or args[0] in ("demo", "topic")


def test_console_script_and_module_run() -> None:
    script = BIN / "rocketspark"
    assert script.exists(), "the console script is missing: pip install -e . again"
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "topic" in done.stdout
    result = run_cli("topic", "--help")
    assert result.code == 0 and "create" in result.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["topic", "create", "--namesrv", "127.0.0.1:9"], "Missing argument 'TOPIC'"),
        (["topic", "lst"], "No such command 'lst'"),
        (["topic", "list"], "Missing option '--namesrv'"),
        (["topic", "list", "--namesrv", "nohost"], "'nohost' is not host:port"),
        (["topic", "create", "bad topic!", "--namesrv", "127.0.0.1:9"], "bad topic!"),
        (["consume", "T", "--namesrv", "127.0.0.1:9", "--offset", "first"], "not earliest, latest or an offset"),
        (["consume", "T", "--namesrv", "127.0.0.1:9", "--since", "yesterday"], "is not a time"),
        (["consume", "T", "--namesrv", "127.0.0.1:9", "--offset", "3", "--since", "1h"], "not both"),
        (["consume", "T", "--namesrv", "127.0.0.1:9", "--tags", "||"], "names no tag"),
        (["message", "show", "--namesrv", "127.0.0.1:9"], "give a message id or --key"),
        (["message", "show", "--namesrv", "127.0.0.1:9", "--key", "k"], "--key needs --topic"),
        (["produce", "T", "--namesrv", "127.0.0.1:9", "--batch", "0"], "--batch"),
        (["--bogus"], "No such option: --bogus"),
    ],
)
def test_bad_usage_is_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, _, err = cli(capsys, *args)
    assert code == 2
    assert message in one_error_line(err)


def test_since_formats() -> None:
    now = 1_800_000_000_000
    assert parse_since("90s", now) == now - 90_000
    assert parse_since("10m", now) == now - 600_000
    assert parse_since("2h", now) == now - 7_200_000
    assert parse_since("1d", now) == now - 86_400_000
    assert parse_since("1700000000000", now) == 1_700_000_000_000
    assert parse_since("2023-11-14T22:13:20+00:00", now) == 1_700_000_000_000


def test_topics(capsys: pytest.CaptureFixture[str], cluster: str) -> None:
    code, out, _ = cli(capsys, "topic", "create", "Clicks", "--queues", "3", "--namesrv", cluster)
    assert (code, out.split(" on ")[0]) == (0, "created topic Clicks with 3 queues")
    code, out, _ = cli(capsys, "topic", "list", "--namesrv", cluster)
    assert code == 0
    assert [line.split() for line in out.splitlines() if "Clicks" in line] == [
        ["│", "Clicks", "│", "3", "│", "broker-a", "│"]
    ]
    assert "TBW102" not in out
    code, out, _ = cli(capsys, "topic", "list", "--all", "--namesrv", cluster)
    assert code == 0 and "TBW102" in out
    code, out, _ = cli(capsys, "topic", "describe", "Clicks", "--namesrv", cluster)
    assert code == 0 and "Clicks on broker-a: 3 read / 3 write queues, perm RW" in out
    assert len([line for line in out.splitlines() if "broker-a │" in line]) == 3
    code, out, _ = cli(capsys, "topic", "delete", "Clicks", "--namesrv", cluster)
    assert code == 0 and out.startswith("deleted topic Clicks from broker-a")
    code, _, err = cli(capsys, "topic", "describe", "Clicks", "--namesrv", cluster)
    assert code == 1
    assert one_error_line(err) == "error: topic Clicks does not exist (no broker serves it)"
    code, _, err = cli(capsys, "topic", "create", "TBW102", "--namesrv", cluster)  # refused by the broker
    assert code == 1 and "TBW102" in one_error_line(err)


@pytest.fixture
def stdin(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.BytesIO]:
    buffer = io.BytesIO()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(buffer))
    yield buffer


def test_produce_consume_show_progress(
    capsys: pytest.CaptureFixture[str], cluster: str, stdin: io.BytesIO, tmp_path: pytest.TempPathFactory
) -> None:
    lines = tmp_path / "lines.txt"  # type: ignore[operator]
    lines.write_text("a 1\n\na [2]\na 3\n")
    code, out, _ = cli(capsys, "produce", "Events", str(lines), "--tags", "plain", "--batch", "2", "--namesrv", cluster)
    assert (code, out) == (0, "sent 3 messages to Events\n")
    stdin.write(b'{"body": "j", "tags": "json", "keys": ["k-1", "k-2"], "properties": {"p": "v"}}\n{"body": [1, 2]}\n')
    stdin.seek(0)
    code, out, _ = cli(capsys, "produce", "Events", "--json", "--namesrv", cluster)
    assert (code, out) == (0, "sent 2 messages to Events\n")

    code, out, err = cli(
        capsys, "consume", "Events", "--offset", "earliest", "--json", "--max", "5", "--namesrv", cluster
    )
    assert code == 0, err
    records = [orjson.loads(line) for line in out.splitlines()]
    assert sorted(r["body"] for r in records) == ["[1,2]", "a 1", "a 3", "a [2]", "j"]
    json_record = next(r for r in records if r["tags"] == "json")
    assert (json_record["keys"], json_record["properties"]) == ("k-1 k-2", {"p": "v"})

    code, out, _ = cli(
        capsys,
        "consume",
        "Events",
        "--offset",
        "earliest",
        "--tags",
        "json || none",
        "--timeout",
        "1",
        "--json",
        "--namesrv",
        cluster,
    )
    assert code == 0 and [orjson.loads(line)["body"] for line in out.splitlines()] == ["j"]
    code, out, _ = cli(capsys, "consume", "Events", "--since", "1h", "--timeout", "1", "--namesrv", cluster)
    assert code == 0 and out.splitlines()[0].split() == ["queue", "offset", "stored", "tags", "keys", "body"]
    assert sum("a [2]" in line for line in out.splitlines()) == 1  # no rich markup in bodies
    code, out, _ = cli(capsys, "consume", "Events", "--timeout", "0.5", "--namesrv", cluster)  # latest: nothing new
    assert (code, out) == (0, "")

    code, out, _ = cli(capsys, "message", "show", json_record["offset_msg_id"], "--json", "--namesrv", cluster)
    assert code == 0 and orjson.loads(out) == json_record
    code, out, _ = cli(
        capsys, "message", "show", json_record["msg_id"], "--topic", "Events", "--json", "--namesrv", cluster
    )
    assert code == 0 and orjson.loads(out) == json_record
    code, out, _ = cli(capsys, "message", "show", "--key", "k-2", "--topic", "Events", "--namesrv", cluster)
    assert code == 0 and "│ body          │ j" in out and "│ properties    │ p=v" in out
    code, _, err = cli(capsys, "message", "show", json_record["msg_id"], "--namesrv", cluster)
    assert code == 1 and "pass --topic" in one_error_line(err)
    code, _, err = cli(capsys, "message", "show", "--key", "nope", "--topic", "Events", "--namesrv", cluster)
    assert (code, one_error_line(err)) == (1, "error: no message with key nope in topic Events")

    queue_id = json_record["queue_id"]
    args = ("Events", "--group", "events-app", "--queue", str(queue_id), "--offset", "earliest", "--max", "1")
    assert cli(capsys, "consume", *args, "--namesrv", cluster)[0] == 0  # commits offset 1 of that queue
    code, out, _ = cli(capsys, "group", "progress", "events-app", "--topic", "Events", "--namesrv", cluster)
    assert code == 0
    rows = [line.replace("│", " ").split() for line in out.splitlines() if line.startswith("│")]
    per_queue = {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in rows if r[0] == "Events"}
    assert sum(m for _, m, _ in per_queue.values()) == 5 and per_queue[queue_id][1] >= 1
    assert all(lag == m - c for c, m, lag in per_queue.values())
    assert rows[-1] == ["total", "1", "5", "4"] and per_queue[queue_id][0] == 1
    code, _, err = cli(capsys, "group", "progress", "nobody", "--namesrv", cluster)
    assert (code, one_error_line(err)) == (1, "error: group nobody has no committed offsets")


def test_produce_refused_line_is_one_error(capsys: pytest.CaptureFixture[str], cluster: str, stdin: io.BytesIO) -> None:
    stdin.write(b'{"body": "ok"}\nnot json\n')
    stdin.seek(0)
    code, _, err = cli(capsys, "produce", "Events", "--json", "--namesrv", cluster)
    assert code == 1 and one_error_line(err).startswith("error: line 2 is not JSON")


def _silent_server() -> socket.socket:
    """A port that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    server.listen(16)
    return server


@pytest.mark.parametrize("kind", ["refused", pytest.param("silent", marks=pytest.mark.slow)])
def test_unreachable_namesrv_fails_within_30_s(kind: str) -> None:
    with _silent_server() as server:
        port = server.getsockname()[1]
        if kind == "refused":
            server.close()
        result = run_cli("topic", "list", "--namesrv", f"127.0.0.1:{port}")
    assert result.code == 1
    assert result.seconds < 30
    assert "no name server answered" in one_error_line(result.err)
    assert "Traceback" not in result.err


@pytest.mark.slow
def test_produce_and_consume_without_namesrv_fail_within_30_s() -> None:
    with _silent_server() as server, ThreadPoolExecutor(2) as pool:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        # side by side: each waits out its own request timeout against the silent port
        producing = pool.submit(run_cli, "produce", "T", "--namesrv", address, stdin="x\n")
        consuming = pool.submit(run_cli, "consume", "T", "--namesrv", address, "--timeout", "1")
        produced, consumed = producing.result(), consuming.result()
    for result in (produced, consumed):
        assert result.code == 1, result.err
        assert result.seconds < 30
        one_error_line(result.err)


def test_debug_adds_traceback(cluster: str) -> None:
    plain = run_cli("topic", "describe", "Nope", "--namesrv", cluster)
    assert (plain.code, one_error_line(plain.err)) == (1, "error: topic Nope does not exist (no broker serves it)")
    debug = run_cli("--debug", "topic", "describe", "Nope", "--namesrv", cluster)
    assert debug.code == 1
    assert "Traceback (most recent call last)" in debug.err
    assert debug.err.splitlines()[-1] == "error: topic Nope does not exist (no broker serves it)"
    assert "DEBUG" in debug.err  # library logs below ERROR


def test_import_is_light() -> None:
    modules = "('pyspark', 'broker', 'namesrv')"
    code = f"import sys, rocketspark.cli.app; print(sorted(m for m in {modules} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
