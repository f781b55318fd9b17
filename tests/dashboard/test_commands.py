"""`rocketspark dev --dashboard-port`, the `--listen` warning, the Origin check of POSTs, and the
mark a Spark source's task leaves for the groups page (no browser: the pages' HTML over HTTP)."""

from __future__ import annotations

import asyncio
import http.client
import re
import urllib.parse
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
from tests.harness import ServerFactory, dev_args, free_port


def page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=15) as response:
        return str(response.read().decode())


def test_dev_serves_the_dashboard_on_its_port(tmp_path: Path) -> None:
    port = free_port()
    with ServerProcess(
        "rocketspark.cli", ["dev", *dev_args(tmp_path, dashboard_port=port)], tmp_path / "dev.log"
    ) as dev:
        lines = []
        while not any(line.startswith("export NAMESRV_ADDR=") for line in lines):
            lines.append(dev._lines.get(timeout=30))  # the boot lines after the name server's
        assert f"The dashboard boot success. listening on 127.0.0.1:{port} (http://127.0.0.1:{port}/)\n" in lines
        assert "broker-a" in page(f"http://127.0.0.1:{port}/")
    assert (tmp_path / "dashboard" / "history.sqlite3").is_file()


def post(address: str, path: str, fields: dict[str, str], headers: dict[str, str]) -> tuple[int, str]:
    """(status, body) of a form POST, redirects not followed."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=15)
    try:
        form = {"Content-Type": "application/x-www-form-urlencoded", **headers}
        connection.request("POST", path, urllib.parse.urlencode(fields), form)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_listening_beyond_loopback_warns_and_posts_from_other_sites_are_refused(
    tmp_path: Path, servers: ServerFactory
) -> None:
    namesrv = servers.namesrv()
    args = ["dashboard", "-n", namesrv.address, "--port", "0", "--listen", "127.0.0.2", "--data-dir", str(tmp_path)]
    with ServerProcess("rocketspark.cli", args, tmp_path / "dashboard.log") as dashboard:
        address = dashboard.address
        assert address.startswith("127.0.0.2:")
        assert "no broker is registered" in page(f"http://{address}/")
        # a form's token with its cookie, as a browser has them after loading a page
        with urllib.request.urlopen(f"http://{address}/topics", timeout=15) as response:
            cookie = response.headers["Set-Cookie"].split(";")[0]
            token = re.search(r'name="csrf" value="([^"]+)"', response.read().decode())
        assert cookie.startswith("rocketspark_csrf=") and token is not None
        form = {"csrf": token.group(1), "topic": "FromElsewhere", "queues": "1"}
        status, body = post(address, "/topics", form, {"Cookie": cookie, "Origin": "https://elsewhere.example"})
        assert status == 403 and "the form was sent from another site" in body
        # the same form from the dashboard's own origin gets past the check (to the create, which
        # finds no broker)
        status, body = post(address, "/topics", form, {"Cookie": cookie, "Origin": f"http://{address}"})
        assert status == 409 and "no broker is registered" in body
        status, _ = post(
            address, "/logout", {"csrf": token.group(1)}, {"Cookie": cookie, "Origin": f"http://{address}"}
        )
        assert status == 303
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
