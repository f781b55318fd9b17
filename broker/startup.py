"""`python -m broker`: run a broker until SIGTERM or SIGINT.

Settings come from `-c broker.conf` (Apache RocketMQ's key names), then from the flags, then from
`--set key=value` (any broker.conf key, e.g. to shorten timers in tests).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from broker.config import BrokerConfig
from broker.controller import BrokerController
from broker.memory import return_freed_memory
from broker.preload import preload
from broker.store.config import StoreConfig
from rocketspark.errors import ConfigError
from rocketspark.logs import LOG_LEVELS, configure_logging
from rocketspark.serving import run_process, serve_until_signalled
from rocketspark.settings import build, read_properties

log = logging.getLogger(__name__)

FLAG_KEYS = {
    "namesrv": "namesrvAddr",
    "broker_name": "brokerName",
    "cluster": "brokerClusterName",
    "broker_id": "brokerId",
    "host": "brokerIP1",
    "listen": "bindAddress",
    "port": "listenPort",
    "grpc_port": "grpcServerPort",
    "data_dir": "storePathRootDir",
}
FLUSH_TYPES = {"sync": "SYNC_FLUSH", "async": "ASYNC_FLUSH"}


def parse_args(argv: list[str] | None = None, prog: str = "python -m broker") -> tuple[BrokerConfig, StoreConfig, str]:
    parser = argparse.ArgumentParser(prog=prog, description="Run a RocketMQ broker until Ctrl-C or SIGTERM.")
    parser.add_argument(
        "-c", "--config", type=Path, metavar="FILE", help="broker.conf with Apache RocketMQ's key names"
    )
    parser.add_argument(
        "--namesrv", metavar="HOST:PORT", help="the name server; several separated by ';' (default: NAMESRV_ADDR)"
    )
    parser.add_argument("--broker-name", metavar="NAME", help="brokerName (default: broker-a)")
    parser.add_argument("--cluster", metavar="NAME", help="brokerClusterName (default: DefaultCluster)")
    parser.add_argument("--broker-id", metavar="ID", help="brokerId; only 0 (master) is supported")
    parser.add_argument(
        "--host",
        metavar="HOST",
        help="brokerIP1: the address published to the name server and clients (default: 127.0.0.1)",
    )
    parser.add_argument(
        "--listen", metavar="HOST", help="bindAddress: the address listened on, e.g. 0.0.0.0 (default: brokerIP1)"
    )
    parser.add_argument("--port", metavar="PORT", help="listenPort; 0 picks a free one (default: 10911)")
    parser.add_argument(
        "--grpc-port",
        metavar="PORT",
        help="grpcServerPort: the RocketMQ 5.x (gRPC) endpoint's port; 0: off (default: 0)",
    )
    parser.add_argument("--data-dir", metavar="DIR", help="storePathRootDir (default: ~/rocketspark/store)")
    parser.add_argument("--flush", choices=sorted(FLUSH_TYPES), help="flushDiskType: sync or async (default: async)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any broker.conf setting")
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help="on stderr (default: %(default)s)")
    args = parser.parse_args(argv)
    values: dict[str, str] = {}
    source = "the command line"
    try:
        if args.config:
            values.update(read_properties(args.config))
            source = f"{args.config} and the command line"
        for flag, key in FLAG_KEYS.items():
            if getattr(args, flag) is not None:
                values[key] = str(getattr(args, flag))
        if args.flush:
            values["flushDiskType"] = FLUSH_TYPES[args.flush]
        for item in args.set:
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
            values[key.strip()] = value.strip()
        broker_config, store_config = build((BrokerConfig, StoreConfig), values, source)
    except ConfigError as exc:
        parser.error(str(exc))
    return broker_config, store_config, args.log_level


def grpc_lines(controller: BrokerController) -> list[str]:
    """The line naming the 5.x endpoint, printed before the boot line (none when it is off)."""
    if controller.grpc is None:
        return []
    return [f"The gRPC endpoint for RocketMQ 5.x clients is at {controller.grpc.address}"]


def main(argv: list[str] | None = None, prog: str = "python -m broker") -> int:
    config, store_config, level = parse_args(argv, prog)
    configure_logging(level)
    trim_memory = return_freed_memory()
    preload()
    try:
        controller = BrokerController(config, store_config, trim_memory=trim_memory)
    except ConfigError as exc:  # the ACL accounts file, read at start
        log.error("broker failed to start: %s", exc)  # noqa: TRY400 - the reason is the whole story
        return 1

    async def start() -> list[str]:
        await controller.start()
        address = controller.address
        lines = [f"The broker[{config.broker_name}, {address}] boot success. listening on {address}"]
        return [*grpc_lines(controller), *lines]

    return run_process(lambda: serve_until_signalled(start, controller.stop), "broker")


if __name__ == "__main__":
    sys.exit(main())
