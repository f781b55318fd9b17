"""`rocketspark group progress|list|create`: a consumer group's committed offsets against the queues'
ends; every group with its clients online and its lag; a group's retries and FIFO consumption."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from rocketspark.cli.common import Admin, CliError, NamesrvOption, command_group, console, in_range, run_admin
from rocketspark.cli.connection_options import client_command

if TYPE_CHECKING:
    from rocketspark.protocol.body.stats import ConsumeStats, OffsetWrapper
    from rocketspark.protocol.queue import MessageQueue

group_app = command_group("Consumer groups: progress, members, lag and settings.")


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


@group_app.command("list")
@client_command
def list_groups(namesrv: NamesrvOption) -> None:
    """Every consumer group: its clients online, topics and lag.

    The groups the master brokers know (GET_ALL_SUBSCRIPTIONGROUP_CONFIG: a heartbeat or a pull made
    them; GET_ALL_CONSUMER_OFFSET: they committed an offset) that committed an offset or have a
    client online. Clients: the group's members online now (GET_CONSUMER_LIST_BY_GROUP; 0 when none
    is); lag: over all its queues, the max offset minus the committed offset (GET_CONSUME_STATS).
    """
    from rocketspark.client.api.admin import get_all_consumer_offsets, get_subscription_groups  # noqa: PLC0415

    async def work(admin: Admin) -> list[tuple[str, set[str], list[ConsumeStats]]]:
        brokers = list((await admin.masters()).values())
        offsets = await asyncio.gather(*(get_all_consumer_offsets(admin.client, a) for a in brokers))
        named = await asyncio.gather(*(get_subscription_groups(admin.client, a) for a in brokers))
        committed = {group for table in offsets for _, group in table}
        candidates = sorted(committed | {group for names in named for group in names})
        clients = await asyncio.gather(*(_clients(admin, brokers, group) for group in candidates))
        shown = [(g, c) for g, c in zip(candidates, clients, strict=True) if c or g in committed]
        stats = await asyncio.gather(*(_stats(admin, brokers, group) for group, _ in shown))
        return [(group, members, s) for (group, members), s in zip(shown, stats, strict=True)]

    groups = run_admin(namesrv, work)
    if not groups:
        console().print("no consumer groups")
        return
    table = Table("group", "clients", "topics", "lag")
    for group, members, stats in groups:
        queues = {queue: w for s in stats for queue, w in s.offset_table.items()}
        lag = sum(max(0, w.broker_offset - w.consumer_offset) for w in queues.values())
        topics = ", ".join(sorted({queue.topic for queue in queues})) or "-"
        table.add_row(group, str(len(members)), topics, str(lag))
    for column in (table.columns[1], table.columns[3]):
        column.justify = "right"
    console().print(table)


async def _clients(admin: Admin, brokers: list[str], group: str) -> set[str]:
    """The client ids of `group`'s members online on any of `brokers`."""
    from rocketspark.client.api.client_manage import get_consumer_list  # noqa: PLC0415
    from rocketspark.errors import ServerSystemError  # noqa: PLC0415

    members: set[str] = set()
    for address in brokers:
        with contextlib.suppress(ServerSystemError):  # "no consumer for this group"
            members.update(await get_consumer_list(admin.client, address, group))
    return members


async def _stats(admin: Admin, brokers: list[str], group: str) -> list[ConsumeStats]:
    from rocketspark.client.api.admin import get_consume_stats  # noqa: PLC0415

    return list(await asyncio.gather(*(get_consume_stats(admin.client, address, group) for address in brokers)))


@group_app.command("create")
@client_command
def create(
    group: Annotated[str, typer.Argument(metavar="GROUP", hidden=True)],
    namesrv: NamesrvOption,
    retry_max_times: Annotated[
        int,
        typer.Option(
            "--retry-max-times", metavar="N", callback=in_range(0), help="retries before the dead-letter topic"
        ),
    ] = 16,
    orderly: Annotated[
        bool, typer.Option("--orderly", help="5.x consumers of the group consume in order (FIFO)")
    ] = False,
) -> None:
    """Create GROUP or set its retries and order (every master broker).

    A message the group's consumers fail is retried N times, then moved to %DLQ%GROUP: a 4.x consumer
    consumes it N + 1 times at most, a 5.x consumer is given it N + 1 times (its delivery attempts).
    With --orderly the group's 5.x consumers are FIFO consumers (consumeMessageOrderly): a push consumer
    retries a failing message itself, in order, before it forwards it to %DLQ%GROUP.
    """
    from rocketspark.client.api.admin import create_subscription_group  # noqa: PLC0415
    from rocketspark.message.validation import validate_group  # noqa: PLC0415

    try:
        validate_group(group)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'GROUP'") from None

    async def work(admin: Admin) -> dict[str, str]:
        masters = await admin.masters()
        await asyncio.gather(
            *(
                create_subscription_group(
                    admin.client, address, group, retry_max_times=retry_max_times, consume_message_orderly=orderly
                )
                for address in masters.values()
            )
        )
        return masters

    masters = run_admin(namesrv, work)
    kind = "orderly" if orderly else "concurrent"
    for name, address in masters.items():
        console().print(f"created {kind} consumer group {group} on {name} ({address}): {retry_max_times} retries")


def register(app: typer.Typer) -> None:
    app.add_typer(group_app, name="group")
