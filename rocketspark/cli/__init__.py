"""The `rocketspark` command line (see docs/cli.md): `rocketspark --help`.

Built on typer, with rich for tables, progress bars and errors. Command groups live in one module
each; the client library, the servers and Spark are imported inside the commands that need them.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script: run `argv` (default: sys.argv[1:]), return the exit code."""
    from rocketspark.cli.app import main as run  # noqa: PLC0415 - `import rocketspark.cli` stays light

    return run(argv)


__all__ = ["main"]
