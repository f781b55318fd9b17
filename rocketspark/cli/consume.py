"""`rocketspark consume`: follow a topic, from an offset or a time, as a table or JSON lines.

It reads every queue of the topic (or one, `--queue`) with a lite-pull consumer in assign mode.
Without `--group` it commits nothing, so it never moves a group's progress; with `--group G` it reads
as G, starts where G left off and commits, after each batch it printed, the next offset of each queue
(UPDATE_CONSUMER_OFFSET through the consumer's commit), as a consumer of G would. Tags are filtered on
the client; a message a tag filter leaves out counts as read.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import TYPE_CHECKING, Annotated

import orjson
import typer
from rich.table import Table

from rocketspark.cli.common import (
    NamesrvOption,
    body_text,
    client_options,
    console,
    count,
    err_console,
    format_time,
    in_range,
    message_record,
    setup_logging,
    split_namesrv,
)
from rocketspark.cli.connection_options import client_command

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from rocketspark.client.sync import LitePullConsumer
    from rocketspark.message.message import MessageExt
    from rocketspark.protocol.queue import MessageQueue

CONSUMER_GROUP = "rocketspark-cli-consumer"
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: the widths of the table's columns, so that rows printed batch by batch line up
_COLUMNS = (("queue", 12), ("offset", 8), ("stored", 23), ("tags", 12), ("keys", 16))


def parse_offset(text: str) -> str | int:
    """`earliest`, `latest` or an offset (int, 0 or more)."""
    value = text.strip().lower()
    if value in ("earliest", "latest"):
        return value
    if value.isdigit():
        return int(value)
    raise typer.BadParameter(f"{text!r} is not earliest, latest or an offset (0 or more)")


def parse_since(text: str, now_ms: int | None = None) -> int:
    """A time as epoch ms: a duration ago (`90s`, `10m`, `2h`, `1d`), ISO 8601, or epoch ms."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    value = text.strip()
    if value.isdigit():
        return int(value)
    match = _RELATIVE.fullmatch(value)
    if match:
        return now - int(float(match.group(1)) * _UNITS_MS[match.group(2)])
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not a time: use a duration ago (10m, 2h, 1d), ISO 8601 or epoch milliseconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time
    return int(moment.timestamp() * 1000)


def consume(
    topic: Annotated[str, typer.Argument(metavar="TOPIC", hidden=True)],
    namesrv: NamesrvOption,
    tags: Annotated[str, typer.Option("--tags", metavar="EXPR", help="tag expression: '*' or 'A || B'")] = "*",
    offset: Annotated[
        str | None,
        typer.Option(
            "--offset",
            metavar="WHERE",
            help="where each queue starts: earliest, latest or an offset (default: latest; with --group, where "
            "the group left off)",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", metavar="TIME", help="start at this time: 10m, 2h, 1d ago, ISO 8601 or epoch ms"),
    ] = None,
    queue: Annotated[
        int | None, typer.Option("--queue", metavar="ID", callback=in_range(0), help="read only this queue id")
    ] = None,
    max_messages: Annotated[
        int | None, typer.Option("--max", metavar="N", callback=in_range(1), help="stop after this many messages")
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            callback=in_range(0.1),
            help="stop when no message arrived for this many seconds",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line instead of table rows")] = False,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            "-g",
            metavar="GROUP",
            help="read as this consumer group and commit what was printed; without it nothing is committed",
        ),
    ] = None,
) -> None:
    """Print TOPIC's messages as they arrive: a table or JSON lines.

    Runs until Ctrl-C, --max or --timeout. Starts at the end of each queue (--offset latest) unless
    told otherwise; --since starts at the first message stored at or after the time.

    Without --group nothing is committed: no group's progress moves. With --group GROUP it starts
    where GROUP left off (queues without a committed offset: at their end) and, after each batch it
    printed, commits per queue the offset after the last message printed, as a consumer would;
    `rocketspark group progress GROUP` then shows it.
    """
    from rocketspark.client.sync import LitePullConsumer  # noqa: PLC0415
    from rocketspark.message.filter import parse_tag_expression  # noqa: PLC0415

    split_namesrv(namesrv)
    if since is not None and offset is not None:
        raise typer.BadParameter("give --offset or --since, not both", param_hint="'--since'")
    start = parse_offset(offset) if offset is not None else "group" if group else "latest"
    since_ms = parse_since(since) if since is not None else None
    try:
        accepted = parse_tag_expression(tags)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--tags'") from None
    setup_logging()
    out = console()
    received = 0
    reader = group or CONSUMER_GROUP
    with LitePullConsumer(reader, namesrv_addr=namesrv, auto_commit=False, **client_options()) as consumer:
        queues = _position(consumer, topic, queue, start, since_ms)
        where = since or (f"where group {group} left off" if start == "group" else start)
        err_console().print(f"reading {count(len(queues), 'queue')} of {topic} from {where}; Ctrl-C stops", style="dim")
        last_message = time.monotonic()
        header = True
        try:
            while max_messages is None or received < max_messages:
                wait_ms = 500 if timeout is None else max(1, min(500, int(timeout * 1000)))
                limit = None if max_messages is None else max_messages - received
                shown, read_to = _take(consumer.poll(timeout_ms=wait_ms), accepted, limit)
                now = time.monotonic()
                if shown:
                    last_message = now
                elif timeout is not None and now - last_message >= timeout:
                    break
                received += len(shown)
                _print(out, shown, as_json, header)
                header = header and not shown
                if group and read_to:
                    consumer.commit(read_to)
        except KeyboardInterrupt:
            pass
    committed = f"; committed for group {group}" if group else ""
    err_console().print(count(received, "message") + committed, style="dim")


def _take(
    polled: Sequence[MessageExt], accepted: frozenset[str] | None, limit: int | None
) -> tuple[list[MessageExt], dict[MessageQueue, int]]:
    """The messages to print (those the tag filter accepts, at most `limit`) and, per queue, the
    offset after the last message read: printed, or left out by the tag filter before the limit."""
    from rocketspark.protocol.queue import MessageQueue  # noqa: PLC0415

    shown: list[MessageExt] = []
    read_to: dict[MessageQueue, int] = {}
    for message in polled:
        if limit is not None and len(shown) >= limit:
            break
        if accepted is None or message.tags in accepted:
            shown.append(message)
        read_to[MessageQueue(message.topic, message.broker_name, message.queue_id)] = message.queue_offset + 1
    return shown, read_to


def _position(
    consumer: LitePullConsumer, topic: str, queue_id: int | None, start: str | int, since_ms: int | None
) -> list[MessageQueue]:
    """Assign the topic's queues (or one) and move each to where reading starts ("group": the
    consumer group's committed offset, else the queue's end)."""
    from rocketspark.cli.common import CliError  # noqa: PLC0415

    queues = consumer.fetch_queues(topic)
    if queue_id is not None:
        queues = [q for q in queues if q.queue_id == queue_id]
        if not queues:
            raise CliError(f"topic {topic} has no queue {queue_id}")
    consumer.assign(queues)
    for q in queues:
        if since_ms is not None:
            consumer.seek(q, consumer.offset_for_timestamp(q, since_ms))
        elif start == "earliest":
            consumer.seek_to_begin(q)
        elif start == "latest":
            consumer.seek_to_end(q)
        elif start == "group":
            committed = consumer.committed(q)
            if committed >= 0:
                consumer.seek(q, committed)
            else:
                consumer.seek_to_end(q)
        else:
            assert isinstance(start, int)
            consumer.seek(q, start)
    return queues


def _print(out: Console, messages: list[MessageExt], as_json: bool, header: bool) -> None:
    if as_json:
        for message in messages:
            out.print(orjson.dumps(message_record(message)).decode(), soft_wrap=True)
        return
    if not messages:
        return
    table = Table(show_header=header, box=None, pad_edge=False)
    for name, width in _COLUMNS:
        table.add_column(name, width=width, no_wrap=True, overflow="ellipsis")
    table.add_column("body", overflow="fold")
    for m in messages:
        table.add_row(
            f"{m.broker_name}#{m.queue_id}",
            str(m.queue_offset),
            format_time(m.store_timestamp)[:23],
            m.tags or "-",
            m.keys or "-",
            body_text(m.body),
        )
    out.print(table)


def register(app: typer.Typer) -> None:
    app.command()(client_command(consume))
