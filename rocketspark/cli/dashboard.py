"""`rocketspark dashboard`: the web dashboard (rocketspark.dashboard, docs/dashboard.md) until Ctrl-C or SIGTERM."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from rocketspark.cli.common import NamesrvOption, client_options, in_range, split_namesrv
from rocketspark.cli.connection_options import client_command

DEFAULT_DATA_DIR = Path.home() / "rocketspark" / "dashboard"


@client_command
def dashboard(
    namesrv: NamesrvOption,
    port: Annotated[
        int, typer.Option("--port", "-p", metavar="PORT", callback=in_range(0, 65535), help="0 picks a free one")
    ] = 8082,
    listen: Annotated[
        str,
        typer.Option(
            "--listen",
            metavar="ADDRESS",
            help="the address to listen on; anything but loopback lets other machines in (a WARNING says so)",
        ),
    ] = "127.0.0.1",
    data_dir: Annotated[
        Path,
        typer.Option("--data-dir", metavar="DIR", help="holds history.sqlite3, the figures sampled over time"),
    ] = DEFAULT_DATA_DIR,
    sample_interval: Annotated[
        float,
        typer.Option(
            "--sample-interval", metavar="SECONDS", callback=in_range(0.1), help="how often lag and rates are sampled"
        ),
    ] = 15.0,
    refresh: Annotated[
        float,
        typer.Option("--refresh", metavar="SECONDS", callback=in_range(0.5), help="how often pages refresh figures"),
    ] = 5.0,
) -> None:
    """Serve the web dashboard (port 8082) until Ctrl-C.

    Pages: the cluster, topics, consumer groups with their lag over time, messages. It reads the
    cluster with RocketMQ 4.x admin requests alone, so it works with Apache RocketMQ too. Set
    ROCKETSPARK_DASHBOARD_PASSWORD to guard every page with a password.
    """
    from rocketspark.dashboard.app import PASSWORD_ENV, DashboardSettings  # noqa: PLC0415 - loaded when run
    from rocketspark.dashboard.server import DashboardServer, boot_lines  # noqa: PLC0415
    from rocketspark.logs import configure_logging  # noqa: PLC0415
    from rocketspark.serving import run_process, serve_until_signalled  # noqa: PLC0415

    settings = DashboardSettings(
        namesrv=split_namesrv(namesrv),
        data_dir=data_dir.expanduser(),
        client_options=client_options(),
        password=os.environ.get(PASSWORD_ENV) or None,
        sample_interval_s=sample_interval,
        refresh_s=refresh,
    )
    configure_logging("INFO")
    server = DashboardServer(settings, listen, port)

    async def start() -> list[str]:
        return boot_lines(await server.start())

    raise typer.Exit(run_process(lambda: serve_until_signalled(start, server.stop), "rocketspark dashboard"))


def register(app: typer.Typer) -> None:
    app.command("dashboard")(dashboard)
