"""`rocketspark dev --dashboard-port`, the `--listen` warning, and the mark a Spark source's task
leaves for the groups page (no browser: the pages' HTML over HTTP)."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark import TaskContext

from rocketspark.dashboard.admin import ClusterAdmin
from rocketspark.dashboard.group_view import query_marks
from rocketspark.processes import ServerProcess
from rocketspark.spark.options import parse
from rocketspark.spark.source.query_mark import mark_query
from tests.harness import ServerFactory


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=15) as response:
        return str(response.read().decode())


def test_dev_serves_the_dashboard_on_its_port(tmp_path: Path) -> None:
    port = free_port()
    args = ["dev", "--namesrv-port", "0", "--broker-port", "0", "--dashboard-port", str(port)]
    with ServerProcess("rocketspark.cli", [*args, "--data-dir", str(tmp_path)], tmp_path / "dev.log") as dev:
        lines = []
        while not any(line.startswith("export NAMESRV_ADDR=") for line in lines):
            lines.append(dev._lines.get(timeout=30))  # the boot lines after the name server's
        assert f"The dashboard boot success. listening on 127.0.0.1:{port} (http://127.0.0.1:{port}/)\n" in lines
        assert "broker-a" in page(f"http://127.0.0.1:{port}/")
    assert (tmp_path / "dashboard" / "history.sqlite3").is_file()


def test_listening_beyond_loopback_warns(tmp_path: Path, servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    args = ["dashboard", "-n", namesrv.address, "--port", "0", "--listen", "127.0.0.2", "--data-dir", str(tmp_path)]
    with ServerProcess("rocketspark.cli", args, tmp_path / "dashboard.log") as dashboard:
        assert dashboard.address.startswith("127.0.0.2:")
        assert "no broker is registered" in page(f"http://{dashboard.address}/")
    log = (tmp_path / "dashboard.log").read_text()
    assert "WARNING" in log and "listens on 127.0.0.2" in log and "ROCKETSPARK_DASHBOARD_PASSWORD" in log


@pytest.fixture
def task_of_query() -> Iterator[None]:
    """A task of a streaming query's batch, with the local properties Spark gives such tasks."""
    context = TaskContext()
    context._localProperties = {
        "sql.streaming.queryId": "4b1d6c59-query",
        "spark.jobGroup.id": "run-7",
        "spark.job.description": "clicks-to-lake\nid = 4b1d6c59-query\nrunId = run-7\nbatch = 3",
    }
    TaskContext._setTaskContext(context)
    try:
        yield
    finally:
        TaskContext._setTaskContext(None)


def test_a_source_task_marks_its_query_for_the_groups_page(servers: ServerFactory, task_of_query: None) -> None:
    namesrv = servers.namesrv()
    options = parse({"nameserver": namesrv.address, "topic": "Clicks", "consumerGroup": "lake-writer"}, streaming=True)
    mark_query(options)

    async def read() -> dict[str, object]:
        admin = ClusterAdmin((namesrv.address,), {}, 5.0)
        try:
            return dict(await query_marks(admin))
        finally:
            await admin.close()

    mark = asyncio.run(read())["lake-writer"]
    assert (mark.query_id, mark.run_id, mark.query_name, mark.topics) == (  # type: ignore[attr-defined]
        "4b1d6c59-query",
        "run-7",
        "clicks-to-lake",
        ["Clicks"],
    )
