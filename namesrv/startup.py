"""`python -m namesrv`: run a name server until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from namesrv.config import DEFAULT_PORT, NamesrvConfig, default_data_dir
from namesrv.controller import NamesrvController
from namesrv.write_guard import parse_allow_list
from rocketspark.logs import LOG_LEVELS, configure_logging
from rocketspark.protocol.codec import DEFAULT_MAX_FRAME_LENGTH
from rocketspark.remoting.tls import TlsMode
from rocketspark.serving import run_process, serve_until_signalled

log = logging.getLogger(__name__)


def parse_args(argv: list[str] | None = None, prog: str = "python -m namesrv") -> tuple[NamesrvConfig, str]:
    parser = argparse.ArgumentParser(prog=prog, description="Run a RocketMQ name server until Ctrl-C or SIGTERM.")
    parser.add_argument(
        "--listen",
        "--host",
        dest="listen",
        metavar="HOST",
        default="127.0.0.1",
        help="address to listen on; 0.0.0.0 for every interface (default: %(default)s)",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, metavar="PORT", help="port; 0 picks a free one (default: %(default)s)"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_dir(),
        metavar="DIR",
        help="where kvConfig.json lives (default: %(default)s)",
    )
    parser.add_argument(
        "--scan-interval-ms",
        type=int,
        default=10_000,
        metavar="MS",
        help="broker liveness scan period (default: %(default)s)",
    )
    parser.add_argument(
        "--broker-expiry-ms",
        type=int,
        default=120_000,
        metavar="MS",
        help="drop brokers silent this long (default: %(default)s)",
    )
    parser.add_argument(
        "--idle-timeout-s",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="close connections idle this long (default: %(default)s)",
    )
    parser.add_argument(
        "--frame-max-length",
        type=int,
        default=DEFAULT_MAX_FRAME_LENGTH,
        metavar="BYTES",
        help="largest frame in bytes; a longer one closes its connection (default: %(default)s)",
    )
    parser.add_argument(
        "--tls.server.mode",
        dest="tls_mode",
        choices=[mode.value for mode in TlsMode],
        help="disabled: plain only; permissive: TLS and plain on one port; enforcing: TLS only "
        "(default: permissive with a certificate, else disabled)",
    )
    parser.add_argument(
        "--tls.server.certPath", dest="tls_cert", type=Path, metavar="FILE", help="PEM certificate chain"
    )
    parser.add_argument(
        "--tls.server.keyPath", dest="tls_key", type=Path, metavar="FILE", help="its PEM private key (unencrypted)"
    )
    parser.add_argument(
        "--write-allow-list",
        metavar="ADDRESSES",
        help="comma-separated addresses and networks (10.0.0.5,10.0.1.0/24) that may register brokers, wipe "
        "write permissions, delete topics and change the KV config (default: anyone)",
    )
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, help="on stderr (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        allowed = parse_allow_list(args.write_allow_list) if args.write_allow_list is not None else None
        config = NamesrvConfig(
            host=args.listen,
            port=args.port,
            data_dir=args.data_dir,
            scan_not_active_broker_interval_ms=args.scan_interval_ms,
            broker_channel_expired_ms=args.broker_expiry_ms,
            server_channel_max_idle_s=args.idle_timeout_s,
            frame_max_length=args.frame_max_length,
            tls_server_mode=args.tls_mode,
            tls_server_cert_path=args.tls_cert,
            tls_server_key_path=args.tls_key,
            write_allow_list=allowed,
        )
    except ValueError as exc:
        parser.error(str(exc))
    return config, args.log_level


def main(argv: list[str] | None = None, prog: str = "python -m namesrv") -> int:
    config, level = parse_args(argv, prog)
    configure_logging(level)
    controller = NamesrvController(config)

    async def start() -> list[str]:
        await controller.start()
        return [f"The Name Server boot success. listening on {controller.address}"]

    return run_process(lambda: serve_until_signalled(start, controller.stop), "name server")


if __name__ == "__main__":
    sys.exit(main())
