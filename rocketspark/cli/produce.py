"""`rocketspark produce`: send the lines (or JSON lines) of stdin or a file as messages."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rocketspark.cli.common import (
    CliError,
    NamesrvOption,
    client_options,
    console,
    count,
    err_console,
    in_range,
    setup_logging,
    split_namesrv,
)
from rocketspark.cli.connection_options import client_command

if TYPE_CHECKING:
    from rocketspark.message.message import Message

PRODUCER_GROUP = "rocketspark-cli-producer"


def produce(
    topic: Annotated[str, typer.Argument(metavar="TOPIC", hidden=True)],
    namesrv: NamesrvOption,
    file: Annotated[Path, typer.Argument(metavar="FILE", hidden=True, allow_dash=True)] = Path("-"),
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help='JSON lines: {"body": ..., "tags": ..., "keys": ..., "properties": {...}}; body as is'
        ),
    ] = False,
    tags: Annotated[
        str | None, typer.Option("--tags", metavar="TAG", help="tag of every message (JSON may set its own)")
    ] = None,
    keys: Annotated[
        str | None, typer.Option("--keys", metavar="KEYS", help="keys of every message, space-separated")
    ] = None,
    batch: Annotated[
        int, typer.Option("--batch", metavar="N", callback=in_range(1, 10_000), help="messages per send request")
    ] = 100,
    progress: Annotated[bool, typer.Option(help="progress bar on stderr (only on a terminal)")] = True,
) -> None:
    """Send the lines of FILE (or stdin) to TOPIC, one message each.

    Each non-empty line of FILE (stdin when FILE is - or left out) is one message, sent in batches;
    prints how many were sent. TOPIC is created on first send when the broker allows it.

    With --json each line is an object whose "body" is sent as its text (a string) or as its JSON
    (anything else), with optional "tags", "keys" (a string or a list) and "properties" (strings).
    """
    from rocketspark.client.sync import Producer  # noqa: PLC0415

    split_namesrv(namesrv)
    setup_logging()
    source = _open(file)
    size = None if str(file) == "-" else os.fstat(source.fileno()).st_size
    err = err_console()
    bar = Progress(
        TextColumn("sending to {task.fields[topic]}"),
        BarColumn(),
        MofNCompleteColumn() if size is None else TextColumn("{task.percentage:>3.0f}%"),
        TextColumn("{task.fields[sent]} messages"),
        TimeElapsedColumn(),
        console=err,
        disable=not (progress and err.is_terminal),
        transient=False,
    )
    sent = 0
    try:
        with source, bar, Producer(PRODUCER_GROUP, namesrv_addr=namesrv, **client_options()) as producer:
            task = bar.add_task("produce", total=size, topic=topic, sent=0)
            for messages, consumed in _batches(source, topic, as_json, tags, keys, batch):
                try:
                    producer.send_batch(messages)
                except Exception as exc:
                    raise CliError(f"{exc} (sent {count(sent, 'message')} before)") from exc
                sent += len(messages)
                bar.update(task, advance=consumed if size is not None else len(messages), sent=sent)
    except KeyboardInterrupt:
        console().print(f"interrupted: sent {count(sent, 'message')} to {topic}")
        raise typer.Exit(130) from None
    console().print(f"sent {count(sent, 'message')} to {topic}")


def _open(file: Path) -> IO[bytes]:
    if str(file) == "-":
        return os.fdopen(os.dup(sys.stdin.fileno()), "rb") if _has_fileno(sys.stdin) else _stdin_bytes()
    try:
        return file.open("rb")
    except OSError as exc:
        raise CliError(f"cannot read {file}: {exc.strerror}") from None


def _has_fileno(stream: IO[str]) -> bool:
    try:
        stream.fileno()
    except (OSError, ValueError):
        return False
    return True


def _stdin_bytes() -> IO[bytes]:
    """stdin without a file descriptor (typer's CliRunner): its bytes buffer."""
    buffer: IO[bytes] = sys.stdin.buffer
    return buffer


def _batches(
    source: IO[bytes], topic: str, as_json: bool, tags: str | None, keys: str | None, size: int
) -> Iterator[tuple[list[Message], int]]:
    """Lists of up to `size` messages and the bytes of input they came from."""
    from rocketspark.message.message import Message  # noqa: PLC0415

    messages: list[Message] = []
    consumed = 0
    for number, raw in enumerate(source, start=1):
        consumed += len(raw)
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            continue
        if as_json:
            messages.append(_from_json(topic, line, number, tags, keys))
        else:
            messages.append(Message(topic, line, tags=tags, keys=keys))
        if len(messages) >= size:
            yield messages, consumed
            messages, consumed = [], 0
    if messages:
        yield messages, consumed


def _from_json(topic: str, line: bytes, number: int, tags: str | None, keys: str | None) -> Message:
    from rocketspark.message.message import Message, join_keys  # noqa: PLC0415

    try:
        value: Any = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise CliError(f"line {number} is not JSON: {exc}") from None
    if not isinstance(value, dict) or "body" not in value:
        raise CliError(f"line {number} is not a JSON object with a body")
    body = value["body"]
    body_bytes = body.encode() if isinstance(body, str) else orjson.dumps(body)
    properties = value.get("properties") or {}
    if not isinstance(properties, dict) or not all(isinstance(v, str) for v in properties.values()):
        raise CliError(f"line {number}: properties must be an object of strings")
    line_keys = value.get("keys", keys)
    if line_keys is not None and not isinstance(line_keys, str | list):
        raise CliError(f"line {number}: keys must be a string or a list of strings")
    return Message(
        topic,
        body_bytes,
        tags=value.get("tags", tags),
        keys=join_keys([str(k) for k in line_keys] if isinstance(line_keys, list) else line_keys),
        properties=properties,
    )


def register(app: typer.Typer) -> None:
    app.command()(client_command(produce))
