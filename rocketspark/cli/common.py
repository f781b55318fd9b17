"""What every command shares: the `--namesrv` option, consoles, logging, errors and an admin session.

Only typer and rich are imported here; the client library is imported inside the functions that
use it, so `rocketspark --help` stays quick.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from rocketspark.message.message import MessageExt
    from rocketspark.protocol.body.route import ClusterInfo, TopicRouteData
    from rocketspark.remoting.client import RemotingClient
    from rocketspark.remoting.signing import SessionCredentials

T = TypeVar("T")

#: the whole of one administrative command (all its requests) must finish within this
OPERATION_TIMEOUT_S = 25.0
#: one request to a name server or a broker
REQUEST_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 3.0

NamesrvOption = Annotated[
    str,
    typer.Option(
        "--namesrv",
        "-n",
        metavar="HOST:PORT",
        envvar="NAMESRV_ADDR",
        show_envvar=True,
        help="the name server; several separated by ';'",
        show_default=False,
    ),
]


def command_group(help_text: str) -> typer.Typer:
    """A group of commands whose help reads well at any width: click's plain formatter, which wraps
    every paragraph to the terminal (COLUMNS) and shows no types on flags, unlike typer's rich panels
    that cut long words short with an ellipsis at 80 columns."""
    return typer.Typer(
        help=help_text,
        no_args_is_help=True,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    )


def in_range(low: float, high: float | None = None) -> Callable[[Any], Any]:
    """An option's callback that refuses a number out of [low, high]; unlike `min=`, it adds no
    `[x>=1]` to the help."""

    def check(value: Any) -> Any:
        if value is not None and (value < low or (high is not None and value > high)):
            allowed = f"{low:g} or more" if high is None else f"from {low:g} to {high:g}"
            raise typer.BadParameter(f"{value} is not {allowed}")
        return value

    return check


class CliError(Exception):
    """A refused or failed operation: printed as one line, exit code 1."""


@dataclass(slots=True)
class State:
    debug: bool = False
    use_tls: bool = False
    tls_trust: str | None = None
    access_key: str | None = None


state = State()


def client_options() -> dict[str, Any]:
    """`--tls`, `--tls-trust` and `--access-key` as the keyword arguments of every client
    (RemotingClient, Producer, ...)."""
    options: dict[str, Any] = {"use_tls": True, "tls_trust": state.tls_trust} if state.use_tls else {}
    credentials = _credentials()
    if credentials is not None:
        options["credentials"] = credentials
    return options


def _credentials() -> SessionCredentials | None:
    """`--access-key` (or ROCKETMQ_ACCESS_KEY) with ROCKETMQ_SECRET_KEY; on a terminal a missing
    secret is asked for without echo. The secret is never an option: command lines are visible to
    every user of the machine and end up in shell histories."""
    from rocketspark.client.config import SECRET_KEY_ENV, SECURITY_TOKEN_ENV, credentials_from_env  # noqa: PLC0415
    from rocketspark.errors import ConfigError  # noqa: PLC0415
    from rocketspark.remoting.signing import SessionCredentials as Credentials  # noqa: PLC0415

    if not state.access_key:
        return credentials_from_env()  # None, or a ConfigError for a lone ROCKETMQ_SECRET_KEY
    try:
        return credentials_from_env(state.access_key)
    except ConfigError:
        if not sys.stdin.isatty():
            raise CliError(f"--access-key {state.access_key} needs its secret key: set {SECRET_KEY_ENV}") from None
    secret = typer.prompt(f"secret key of {state.access_key}", hide_input=True, err=True)
    return Credentials(state.access_key, secret, os.environ.get(SECURITY_TOKEN_ENV) or None)


def _width() -> int | None:
    """Rich's width: the terminal's; when piped, COLUMNS or wide enough not to cut table rows."""
    return None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200


def console() -> Console:
    """Tables and listings on stdout (a new one each call: tests swap sys.stdout)."""
    return Console(width=_width(), soft_wrap=False, highlight=False, markup=False, emoji=False)


def err_console() -> Console:
    """Progress bars and error lines on stderr."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    """The one line an error prints (on stderr)."""
    err_console().print(Text("error: ", style="bold red") + Text(message.replace("\n", " ")), soft_wrap=True)


def setup_logging() -> None:
    """Library logs on stderr: ERROR and above, or everything with `--debug` (servers set their own)."""
    from rocketspark.logs import configure_logging  # noqa: PLC0415 - keep imports of the CLI light

    configure_logging("DEBUG" if state.debug else "ERROR")
    logging.getLogger().setLevel(logging.DEBUG if state.debug else logging.ERROR)


def split_namesrv(namesrv: str) -> tuple[str, ...]:
    addresses = tuple(a.strip() for a in namesrv.split(";") if a.strip())
    if not addresses:
        raise typer.BadParameter("no name server address given", param_hint="'--namesrv'")
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise typer.BadParameter(f"{address!r} is not host:port", param_hint="'--namesrv'")
    return addresses


class Admin:
    """Requests of one command: a remoting client, the name servers (tried in turn) and their answers."""

    def __init__(self, namesrv: str) -> None:
        from rocketspark.remoting.client import RemotingClient  # noqa: PLC0415

        self.namesrv_addrs = split_namesrv(namesrv)
        self.client: RemotingClient = RemotingClient(
            connect_timeout_s=CONNECT_TIMEOUT_S, request_timeout_s=REQUEST_TIMEOUT_S, **client_options()
        )

    async def on_namesrv(self, request: Callable[[RemotingClient, str], Awaitable[T]]) -> T:
        """`request(client, address)` on the first name server that answers."""
        from rocketspark.errors import RemotingError  # noqa: PLC0415

        failures = []
        for address in self.namesrv_addrs:
            try:
                return await request(self.client, address)
            except RemotingError as exc:
                failures.append(f"{address}: {exc}")
        raise CliError(f"no name server answered ({'; '.join(failures)})")

    async def route(self, topic: str) -> TopicRouteData:
        from rocketspark.client.api.route import get_route  # noqa: PLC0415
        from rocketspark.errors import TopicNotExistError  # noqa: PLC0415

        try:
            return await self.on_namesrv(lambda client, address: get_route(client, address, topic))
        except TopicNotExistError:
            raise CliError(f"topic {topic} does not exist (no broker serves it)") from None

    async def cluster(self) -> ClusterInfo:
        from rocketspark.client.api.route import get_cluster_info  # noqa: PLC0415

        return await self.on_namesrv(get_cluster_info)

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name -> master address of every broker (of `cluster`) the name server knows."""
        info = await self.cluster()
        if cluster is not None and cluster not in info.cluster_addr_table:
            known = ", ".join(sorted(info.cluster_addr_table)) or "none"
            raise CliError(f"cluster {cluster} is not known to the name server (clusters: {known})")
        names = info.cluster_addr_table.get(cluster, []) if cluster else list(info.broker_addr_table)
        masters = {
            name: data.master_address
            for name in sorted(names)
            if (data := info.broker_addr_table.get(name)) is not None and data.master_address
        }
        if not masters:
            raise CliError("no broker is registered with the name server")
        return masters

    async def close(self) -> None:
        await self.client.close()


def run_admin(namesrv: str, work: Callable[[Admin], Awaitable[T]], timeout_s: float = OPERATION_TIMEOUT_S) -> T:
    """Run `work` with an Admin session; everything it does must end within `timeout_s`."""
    setup_logging()
    admin = Admin(namesrv)

    async def main() -> T:
        try:
            async with asyncio.timeout(timeout_s):
                return await work(admin)
        except TimeoutError:
            raise CliError(f"no answer within {timeout_s:g} s (name servers {';'.join(admin.namesrv_addrs)})") from None
        finally:
            await admin.close()

    return asyncio.run(main())


def format_time(timestamp_ms: int) -> str:
    """Local time with milliseconds, or '-' for 0."""
    if timestamp_ms <= 0:
        return "-"
    import datetime as dt  # noqa: PLC0415

    moment = dt.datetime.fromtimestamp(timestamp_ms / 1000).astimezone()
    return moment.isoformat(sep=" ", timespec="milliseconds")


def body_text(body: bytes) -> str:
    """The body as text; bytes that are not UTF-8 are shown escaped."""
    try:
        return body.decode()
    except UnicodeDecodeError:
        return body.decode("utf-8", "backslashreplace")


def message_record(message: MessageExt) -> dict[str, object]:
    """A received message as one JSON object (`consume --json`, `message show --json`)."""
    from rocketspark.message.properties.codec import SYSTEM_KEYS  # noqa: PLC0415

    return {
        "topic": message.topic,
        "broker": message.broker_name,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "msg_id": message.msg_id,
        "offset_msg_id": message.offset_msg_id,
        "tags": message.tags,
        "keys": message.keys,
        "born_timestamp": message.born_timestamp,
        "store_timestamp": message.store_timestamp,
        "born_host": message.born_host,
        "store_host": message.store_host,
        "properties": {k: v for k, v in message.properties.items() if k not in SYSTEM_KEYS},
        "body": body_text(message.body),
    }


def count(n: int, noun: str) -> str:
    """`1 message`, `3 messages`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
