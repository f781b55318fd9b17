"""Every `$ ...` line of docs/cli.md's console blocks runs, in order, against a real name server and
broker; its output must be the lines under it, times, addresses, message ids, table borders and column
widths aside."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import cli_env

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
HEX_ID = re.compile(r"\b[0-9A-F]{32}\b")
NORMALIZE = (
    (re.compile(r"[\u2500-\u257f]"), " "),  # table borders
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}(?:[+-]\d\d:\d\d|Z)?"), "<time>"),
    (re.compile(r"\d+\.\d+\.\d+\.\d+:\d+"), "<address>"),
    (HEX_ID, "<id>"),
    (re.compile(r"\b\d{13}\b"), "<ms>"),
    (re.compile(r"\s+"), " "),
)


def examples() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of the console blocks, in order."""
    steps: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", DOC.read_text(), re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
    return steps


def normalize(lines: list[str]) -> list[str]:
    result = []
    for line in lines:
        text = line
        for pattern, replacement in NORMALIZE:
            text = pattern.sub(replacement, text)
        if text.strip():
            result.append(text.strip())
    return result


@pytest.mark.slow
def test_doc_examples(cluster: str, tmp_path: Path) -> None:
    steps = examples()
    assert len(steps) >= 16, "docs/cli.md lost its examples"
    ids: dict[str, str] = {}  # message ids in the doc -> the ids of this run
    for doc_command, expected in steps:
        command = doc_command
        for doc_id, real_id in ids.items():
            command = command.replace(doc_id, real_id)
        done = subprocess.run(
            ["bash", "-c", command.replace("rocketspark ", "python -m rocketspark.cli ", 1)],
            capture_output=True,
            text=True,
            env=cli_env(cluster),
            cwd=tmp_path,
            timeout=60,
            check=False,
        )
        actual = done.stdout.splitlines() + [line for line in done.stderr.splitlines() if line.startswith("error:")]
        context = f"{command}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        assert done.returncode == (1 if any(line.startswith("error:") for line in expected) else 0), context
        assert normalize(actual) == normalize(expected), context
        for doc_id, real_id in zip(HEX_ID.findall("\n".join(expected)), HEX_ID.findall(done.stdout), strict=False):
            ids.setdefault(doc_id, real_id)
