"""Every command's and subcommand's `--help` as a newcomer sees it when not on a terminal: 80 columns
(COLUMNS=80), no text cut short, no types on flags, one placeholder style, `rocketspark` in the usage
of the server commands (their flags are argparse's: rocketspark.cli.servers)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import typer

from rocketspark.cli.app import app
from tests.cli.conftest import cli_env

SERVERS = ("dev", "namesrv", "broker")


def command_paths() -> list[tuple[str, ...]]:
    """The root and every command and subcommand, as argument lists."""
    paths: list[tuple[str, ...]] = [()]

    def walk(command: object, path: tuple[str, ...]) -> None:
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            paths.append((*path, name))
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return paths


def help_at_80(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**cli_env(), "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "rocketspark.cli", *args, "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_every_command_is_listed() -> None:
    paths = {" ".join(path) for path in command_paths()}
    assert {"", "dev", "namesrv", "broker", "topic create", "consume", "produce", "group progress"} <= paths


@pytest.mark.parametrize("path", command_paths(), ids=lambda path: " ".join(path) or "rocketspark")
def test_help_reads_well_at_80_columns(path: tuple[str, ...]) -> None:
    done = help_at_80(*path)
    text = done.stdout
    assert done.returncode == 0, done.stderr
    assert text.strip(), done.stderr
    assert "…" not in text
    assert not re.search(r"^(?!Usage:).*\.\.\.$", text, re.M), f"a line cut short:\n{text}"
    assert "<bool>" not in text and not re.search(r"<\w+( range)?>", text), f"type noise:\n{text}"
    assert not re.search(r"\[x?[<>]=|<=x", text), f"range noise:\n{text}"
    assert not re.search(r"\{[a-z_]+\}|\[\[", text), f"a placeholder not in CAPITALS:\n{text}"
    assert max(len(line) for line in text.splitlines()) <= 80, text
    usage = text.splitlines()[0]
    assert usage.lower().startswith(f"usage: rocketspark {' '.join(path)}".rstrip()), usage
    assert "python -m" not in text and "later also" not in text


@pytest.mark.parametrize("server", SERVERS)
def test_server_help_shows_ports_and_defaults(server: str) -> None:
    text = " ".join(help_at_80(server).stdout.split())
    ports = {"dev": ("9876", "10911"), "namesrv": ("9876",), "broker": ("10911",)}[server]
    assert all(f"(default: {port})" in text for port in ports), text
    assert "(default: INFO)" in text
