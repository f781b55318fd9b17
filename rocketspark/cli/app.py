"""The `rocketspark` command: the root group, `--debug`, and how errors end the process.

Exit codes: 0 on success, 1 when an operation was refused or failed, 2 on bad usage. An error is
one line on stderr (`error: ...`); `--debug` adds its traceback and the library's logs below ERROR.
"""

from __future__ import annotations

import sys
import traceback
from typing import Annotated

import typer

from rocketspark.cli import consume, dashboard, group, message, produce, servers, topic
from rocketspark.cli.common import CliError, print_error, state
from rocketspark.cli.connection_options import RootAccessKeyOption, TlsOption, TlsTrustOption

app = typer.Typer(
    name="rocketspark",
    help="RocketMQ for PySpark: run the bundled servers, manage topics, send and read messages.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # see command_group (rocketspark.cli.common)
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


@app.callback()
def root(
    debug: Annotated[
        bool, typer.Option("--debug", help="on errors, print the traceback; show the library's logs below ERROR")
    ] = False,
    tls: TlsOption = False,
    tls_trust: TlsTrustOption = None,
    access_key: RootAccessKeyOption = None,
) -> None:
    state.debug = debug
    state.use_tls, state.tls_trust, state.access_key = tls, tls_trust, access_key  # main() may run again


servers.register(app)
topic.register(app)
produce.register(app)
consume.register(app)
message.register(app)
group.register(app)
dashboard.register(app)


def _usage_line(exc: typer.TyperException) -> str:
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return f"{exc.format_message()}{hint}"


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv` (default: sys.argv[1:]) and return the exit code."""
    try:
        result = app(args=argv, prog_name="rocketspark", standalone_mode=False)
    except typer.TyperException as exc:  # usage errors (exit code 2) and click's other errors
        if type(exc).__name__ == "NoArgsIsHelpError":  # a group without its command: show its help
            print(exc.format_message(), file=sys.stderr)
        else:
            print_error(_usage_line(exc))
        return exc.exit_code
    except typer.Abort:
        print_error("aborted")
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if state.debug:
            traceback.print_exc()
        print_error(_message(exc))
        return 1
    return result if isinstance(result, int) else 0


def _message(exc: Exception) -> str:
    from rocketspark.errors import RocketMQError  # noqa: PLC0415 - imported when there is an error

    if isinstance(exc, CliError | RocketMQError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        name = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{name}"
    return f"{type(exc).__name__}: {exc}"
