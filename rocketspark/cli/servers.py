"""`rocketspark dev`, `rocketspark namesrv`, `rocketspark broker`: the bundled servers; `rocketspark demo`.

Each server has one set of flags, parsed by its own module (`rocketspark.dev`, `namesrv.startup`,
`broker.startup`, with argparse): these commands hand their arguments, `--help` included, to that
module's `main(argv, prog)` unchanged, so `rocketspark broker --port 0` is `python -m broker --port 0`;
`prog` makes their usage and help read `rocketspark broker`. The servers are imported only when one
of these commands runs.
"""

from __future__ import annotations

from typing import Annotated

import typer

from rocketspark.cli.common import in_range

PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def dev(ctx: typer.Context) -> None:
    """A name server and a broker in one process (ports 9876, 10911).

    Prints their addresses and the data directory (default ~/rocketspark); stops on Ctrl-C or
    SIGTERM. `rocketspark dev --help` lists the flags.
    """
    from rocketspark import dev as embedded  # noqa: PLC0415 - the servers load only when run

    argv = list(ctx.args)
    args = embedded.parse_args(argv, prog="rocketspark dev")  # the flags' one parser; --help and bad flags end here
    print(f"data dir: {args.data_dir.expanduser().resolve()}", flush=True)
    raise typer.Exit(embedded.main(argv, prog="rocketspark dev"))


def namesrv(ctx: typer.Context) -> None:
    """A name server (port 9876) until Ctrl-C or SIGTERM; see --help."""
    from namesrv.startup import main as run  # noqa: PLC0415

    raise typer.Exit(run(list(ctx.args), prog="rocketspark namesrv"))


def broker(ctx: typer.Context) -> None:
    """A broker (port 10911) until Ctrl-C or SIGTERM; see --help."""
    from broker.startup import main as run  # noqa: PLC0415

    raise typer.Exit(run(list(ctx.args), prog="rocketspark broker"))


def demo(
    events: Annotated[
        int, typer.Option("--events", metavar="N", callback=in_range(1), help="how many events the demo sends")
    ] = 1_000_000,
    keep: Annotated[bool, typer.Option("--keep", help="keep the servers and data after the demo")] = False,
) -> None:
    """Run the demo: servers, a producer and a Spark job.

    The main job's demo (rocketspark.apps.demo); it needs PySpark: pip install 'rocketspark[spark]'.
    """
    from rocketspark.extras import require_pyspark  # noqa: PLC0415

    require_pyspark("rocketspark demo")
    from rocketspark.apps.demo import run_demo  # noqa: PLC0415 - it loads Spark: only when asked for

    raise typer.Exit(run_demo(events=events, keep=keep))


def register(app: typer.Typer) -> None:
    for command in (dev, namesrv, broker):
        app.command(context_settings=PASS_THROUGH, add_help_option=False)(command)
    app.command()(demo)
