"""`rocketspark group progress`: a consumer group's committed offsets against the queues' ends."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from rocketspark.cli.common import Admin, CliError, NamesrvOption, command_group, console, run_admin
from rocketspark.cli.connection_options import client_command

if TYPE_CHECKING:
    from rocketspark.protocol.body.stats import OffsetWrapper
    from rocketspark.protocol.queue import MessageQueue

group_app = command_group("Consumer groups: their progress, members and lag.")


@group_app.command("progress")
@client_command
def progress(
    group: Annotated[str, typer.Argument(metavar="GROUP", hidden=True)],
    namesrv: NamesrvOption,
    topic: Annotated[str | None, typer.Option("--topic", "-t", metavar="TOPIC", help="only this topic")] = None,
) -> None:
    """GROUP's committed offset, max offset and lag per queue.

    One row per queue and a total line, for every topic GROUP has committed offsets for on any
    broker (--topic: one).
    """
    from rocketspark.client.api.admin import get_consume_stats  # noqa: PLC0415
    from rocketspark.client.routes import master_addresses  # noqa: PLC0415

    async def work(admin: Admin) -> dict[MessageQueue, OffsetWrapper]:
        brokers = master_addresses(await admin.route(topic)) if topic else await admin.masters()
        stats = await asyncio.gather(
            *(get_consume_stats(admin.client, address, group, topic) for address in brokers.values())
        )
        return {queue: offsets for s in stats for queue, offsets in s.offset_table.items()}

    offsets = run_admin(namesrv, work)
    if not offsets:
        where = f" for topic {topic}" if topic else ""
        raise CliError(f"group {group} has no committed offsets{where}")
    table = Table("topic", "broker", "queue", "committed", "max offset", "lag", show_footer=True)
    committed_total = max_total = lag_total = 0
    for queue, wrapper in sorted(offsets.items()):
        lag = max(0, wrapper.broker_offset - wrapper.consumer_offset)
        committed_total += wrapper.consumer_offset
        max_total += wrapper.broker_offset
        lag_total += lag
        table.add_row(
            queue.topic,
            queue.broker_name,
            str(queue.queue_id),
            str(wrapper.consumer_offset),
            str(wrapper.broker_offset),
            str(lag),
        )
    for column, footer in zip(
        table.columns, ("total", "", "", str(committed_total), str(max_total), str(lag_total)), strict=True
    ):
        column.footer = footer
    for column in table.columns[2:]:
        column.justify = "right"
    console().print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(group_app, name="group")
