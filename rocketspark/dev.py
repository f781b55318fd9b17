"""A name server and a broker in one process: the embedded default for laptops and notebooks.

`python -m rocketspark.dev`, or `rocketspark dev`. Both servers share one event loop; SIGTERM or
SIGINT stops the dashboard (`--dashboard-port`, 8082; 0: none), the broker (flush, persist,
unregister) and then the name server.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from broker.config import DEFAULT_PORT as BROKER_PORT
from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.flavor import Flavor
from broker.startup import grpc_lines
from broker.store.config import FlushDiskType, StoreConfig
from namesrv.config import DEFAULT_PORT as NAMESRV_PORT
from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from rocketspark.logs import LOG_LEVELS, configure_logging
from rocketspark.serving import run_process, serve_until_signalled

if TYPE_CHECKING:
    from rocketspark.dashboard.server import DashboardServer

log = logging.getLogger(__name__)

#: the 5.x endpoint's port under `rocketspark dev` (Apache's proxy default)
GRPC_PORT = 8081
#: the web dashboard's default port (rocketspark.dashboard)
DASHBOARD_PORT = 8082


DESCRIPTION = (
    "Run a name server and a broker in one process, the default for laptops, notebooks and tests, "
    "until Ctrl-C or SIGTERM. It prints their addresses and `export NAMESRV_ADDR=...`."
)


def parse_args(argv: list[str] | None, prog: str = "python -m rocketspark.dev") -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("--host", default="127.0.0.1", help="address both servers listen on (default: %(default)s)")
    parser.add_argument(
        "--namesrv-port",
        type=int,
        default=NAMESRV_PORT,
        metavar="PORT",
        help="the name server's port; 0 picks a free one (default: %(default)s)",
    )
    parser.add_argument(
        "--broker-port",
        type=int,
        default=BROKER_PORT,
        metavar="PORT",
        help="the broker's port; 0 picks a free one (default: %(default)s)",
    )
    parser.add_argument(
        "--grpc-port",
        type=int,
        default=GRPC_PORT,
        metavar="PORT",
        help="the broker's gRPC endpoint for RocketMQ 5.x clients (grpcServerPort); 0 turns it off "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--dashboard-port",
        type=int,
        default=DASHBOARD_PORT,
        metavar="PORT",
        help="the web dashboard's port (docs/dashboard.md); 0 turns it off (default: %(default)s)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path.home() / "rocketspark",
        metavar="DIR",
        help="holds namesrv/ and store/, kept between runs (default: %(default)s)",
    )
    parser.add_argument(
        "--flush", choices=("sync", "async"), default="async", help="flushDiskType (default: %(default)s)"
    )
    parser.add_argument(
        "--flavor",
        choices=[flavor.name for flavor in Flavor],
        default=Flavor.rocketspark.name,
        help="the broker's flavor; apache answers as Apache RocketMQ 4.9 does (default: %(default)s)",
    )
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help="on stderr (default: %(default)s)")
    return parser.parse_args(argv)


class EmbeddedDashboard:
    """The web dashboard beside the servers (`--dashboard-port`), when its libraries are installed."""

    def __init__(self) -> None:
        self.server: DashboardServer | None = None

    async def start(self, namesrv: str, host: str, port: int, data_dir: Path) -> str:
        try:
            from rocketspark.dashboard.app import PASSWORD_ENV, DashboardSettings  # noqa: PLC0415 - optional extra
            from rocketspark.dashboard.server import DashboardServer  # noqa: PLC0415
        except ImportError as exc:
            return f"no dashboard: {exc.name} is not installed (pip install 'rocketspark[dashboard]')"
        settings = DashboardSettings((namesrv,), data_dir / "dashboard", password=os.environ.get(PASSWORD_ENV) or None)
        server = DashboardServer(settings, host, port)
        try:
            address = await server.start()
        except OSError as exc:  # the servers run on without it
            return f"no dashboard: {exc} (--dashboard-port picks another port, 0 none)"
        self.server = server
        return f"The dashboard boot success. listening on {address} (http://{address}/)"

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()


def main(argv: list[str] | None = None, prog: str = "python -m rocketspark.dev") -> int:
    args = parse_args(argv, prog)
    configure_logging(args.log_level)
    namesrv = NamesrvController(
        NamesrvConfig(host=args.host, port=args.namesrv_port, data_dir=args.data_dir / "namesrv")
    )
    brokers: list[BrokerController] = []
    dashboard = EmbeddedDashboard()

    async def start() -> list[str]:
        await namesrv.start()
        broker = BrokerController(
            BrokerConfig(
                flavor=Flavor[args.flavor],
                namesrv_addr=namesrv.address,
                broker_ip1=args.host,
                listen_port=args.broker_port,
                grpc_server_port=args.grpc_port,
            ),
            StoreConfig(
                store_path_root_dir=args.data_dir / "store",
                flush_disk_type=FlushDiskType.SYNC_FLUSH if args.flush == "sync" else FlushDiskType.ASYNC_FLUSH,
            ),
        )
        await broker.start()
        brokers.append(broker)
        lines = [
            f"The Name Server boot success. listening on {namesrv.address}",
            *grpc_lines(broker),
            f"The broker[{broker.config.broker_name}, {broker.address}] boot success. listening on {broker.address}",
        ]
        if args.dashboard_port:
            lines.append(await dashboard.start(namesrv.address, args.host, args.dashboard_port, args.data_dir))
        return [*lines, f"export NAMESRV_ADDR={namesrv.address}"]

    async def stop() -> None:
        await dashboard.stop()
        for broker in brokers:
            await broker.stop()
        await namesrv.stop()

    return run_process(lambda: serve_until_signalled(start, stop), "rocketspark dev")


if __name__ == "__main__":
    sys.exit(main())
