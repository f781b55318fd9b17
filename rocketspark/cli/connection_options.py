"""`--tls`, `--tls-trust` and `--access-key`: how every client command connects, given before the command
(`rocketspark --tls topic list`) or after it (`rocketspark topic list --tls`), as `--namesrv` is.

The root callback takes them before the command; `client_command` adds them to a command's own
options. Both write the same `state` (rocketspark.cli.common), which `client_options()` reads.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer

from rocketspark.cli.common import state
from rocketspark.errors import ConfigError
from rocketspark.remoting.tls import require_tls_for_trust

TLS_HELP = "connect to name servers and brokers over TLS, verifying their certificates"
TLS_TRUST_HELP = (
    "with --tls: the PEM CA file that signed the servers' certificates (default: the system's CAs); "
    "'insecure' (or 'any') accepts any certificate (tests only)"
)
ACCESS_KEY_HELP = (
    "sign every request with this access key (brokers with ACL on); its secret comes from "
    "ROCKETMQ_SECRET_KEY, or a hidden prompt on a terminal"
)

TlsOption = Annotated[bool, typer.Option("--tls", help=TLS_HELP)]
TlsTrustOption = Annotated[str | None, typer.Option("--tls-trust", metavar="CA_FILE", help=TLS_TRUST_HELP)]
#: the root's --access-key also reads ROCKETMQ_ACCESS_KEY; a command's overrides it only when given
RootAccessKeyOption = Annotated[
    str | None,
    typer.Option("--access-key", metavar="KEY", envvar="ROCKETMQ_ACCESS_KEY", show_envvar=True, help=ACCESS_KEY_HELP),
]
AccessKeyOption = Annotated[str | None, typer.Option("--access-key", metavar="KEY", help=ACCESS_KEY_HELP)]

_ADDED = (
    inspect.Parameter("tls", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=TlsOption),
    inspect.Parameter("tls_trust", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=TlsTrustOption),
    inspect.Parameter("access_key", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=AccessKeyOption),
)


def set_connection(tls: bool, tls_trust: str | None, access_key: str | None) -> None:
    """Record the options given (a flag left off or an option not given keeps what the root set)."""
    if tls:
        state.use_tls = True
    if tls_trust is not None:
        state.tls_trust = tls_trust
    if access_key:
        state.access_key = access_key


def client_command(command: Callable[..., None]) -> Callable[..., None]:
    """`command` taking `--tls`, `--tls-trust` and `--access-key` among its own options too; placed
    below the `@app.command` decorator."""

    @functools.wraps(command)
    def run(
        *args: Any, tls: bool = False, tls_trust: str | None = None, access_key: str | None = None, **kw: Any
    ) -> None:
        set_connection(tls, tls_trust, access_key)
        try:
            require_tls_for_trust(state.use_tls, state.tls_trust, trust_name="--tls-trust", tls_name="--tls")
        except ConfigError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--tls-trust'") from None
        command(*args, **kw)

    # typer reads the parameters from the signature and their types from the annotations
    signature = inspect.signature(command, eval_str=True)
    run.__signature__ = signature.replace(parameters=[*signature.parameters.values(), *_ADDED])  # type: ignore[attr-defined]
    hints = typing.get_type_hints(command, include_extras=True)
    run.__annotations__ = {**hints, **{parameter.name: parameter.annotation for parameter in _ADDED}}
    return run
