"""`rocketspark topic create|list|describe|delete`."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from rocketspark.cli.common import (
    Admin,
    CliError,
    NamesrvOption,
    command_group,
    console,
    count,
    format_time,
    in_range,
    run_admin,
)
from rocketspark.cli.connection_options import client_command

if TYPE_CHECKING:
    from rocketspark.protocol.body.route import TopicRouteData

topic_app = command_group("Create, list, describe and delete topics.")

#: how long `topic create` waits for the name server to route the new topic
ROUTE_WAIT_S = 10.0


@topic_app.command("create")
@client_command
def create(
    topic: Annotated[str, typer.Argument(metavar="TOPIC", hidden=True)],
    namesrv: NamesrvOption,
    queues: Annotated[
        int, typer.Option("--queues", "-q", metavar="N", callback=in_range(1), help="read and write queues per broker")
    ] = 8,
    cluster: Annotated[
        str | None, typer.Option("--cluster", "-c", metavar="NAME", help="only the brokers of this cluster")
    ] = None,
    order: Annotated[bool, typer.Option("--order", help="mark the topic as ordered")] = False,
) -> None:
    """Create TOPIC on every master broker (or set its queue count)."""
    from rocketspark.client.api.admin import create_topic  # noqa: PLC0415
    from rocketspark.message.validation import validate_topic  # noqa: PLC0415
    from rocketspark.protocol.body.topic import TopicConfig  # noqa: PLC0415

    try:
        validate_topic(topic)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'TOPIC'") from None

    async def work(admin: Admin) -> dict[str, str]:
        masters = await admin.masters(cluster)
        config = TopicConfig(topic, read_queue_nums=queues, write_queue_nums=queues, order=order)
        await asyncio.gather(*(create_topic(admin.client, address, config) for address in masters.values()))
        await _wait_routed(admin, topic, set(masters))
        return masters

    masters = run_admin(namesrv, work)
    for name, address in masters.items():
        console().print(f"created topic {topic} with {count(queues, 'queue')} on {name} ({address})")


async def _wait_routed(admin: Admin, topic: str, brokers: set[str]) -> None:
    """Until the name server routes `topic` to every one of `brokers` (they register on change)."""
    from rocketspark.client.api.route import get_route  # noqa: PLC0415
    from rocketspark.errors import TopicNotExistError  # noqa: PLC0415

    loop = asyncio.get_running_loop()
    deadline = loop.time() + ROUTE_WAIT_S
    while True:
        try:
            route = await admin.on_namesrv(lambda client, address: get_route(client, address, topic))
            if brokers <= {q.broker_name for q in route.queue_datas}:
                return
        except TopicNotExistError:
            pass
        if loop.time() > deadline:
            raise CliError(f"topic {topic} was created but the name server does not route it after {ROUTE_WAIT_S:g} s")
        await asyncio.sleep(0.05)


def _queue_count(route: TopicRouteData) -> int:
    return sum(q.read_queue_nums for q in route.queue_datas)


@topic_app.command("list")
@client_command
def list_topics(
    namesrv: NamesrvOption,
    show_all: Annotated[bool, typer.Option("--all", "-a", help="include system and retry topics")] = False,
) -> None:
    """List topics with their queue counts and brokers."""
    from rocketspark.client.api.route import get_all_topics  # noqa: PLC0415
    from rocketspark.message.validation import is_system_topic  # noqa: PLC0415

    async def work(admin: Admin) -> list[tuple[str, TopicRouteData | None]]:
        names = await admin.on_namesrv(get_all_topics)
        info = await admin.cluster()
        hidden = set(info.cluster_addr_table) | set(info.broker_addr_table)
        names = sorted(n for n in names if show_all or not (is_system_topic(n) or n in hidden))
        routes = await asyncio.gather(*(admin.route(n) for n in names), return_exceptions=True)
        return [(n, r if not isinstance(r, BaseException) else None) for n, r in zip(names, routes, strict=True)]

    rows = run_admin(namesrv, work)
    table = Table("topic", "queues", "brokers")
    for name, route in rows:
        if route is None:
            table.add_row(name, "-", "-")
        else:
            brokers = ", ".join(sorted({q.broker_name for q in route.queue_datas}))
            table.add_row(name, str(_queue_count(route)), brokers)
    if not rows:
        console().print("no topics")
        return
    console().print(table)


@topic_app.command("describe")
@client_command
def describe(topic: Annotated[str, typer.Argument(metavar="TOPIC", hidden=True)], namesrv: NamesrvOption) -> None:
    """TOPIC's queues: offsets, messages, last store time.

    Per queue: broker, min and max offset, messages and last store time, then a total line and the
    half messages (transactional sends) waiting for their commit or rollback, per broker.
    """
    from rocketspark.client.api.admin import get_runtime_info, get_topic_stats  # noqa: PLC0415
    from rocketspark.client.routes import master_addresses  # noqa: PLC0415
    from rocketspark.protocol.body.stats import TopicStatsTable  # noqa: PLC0415

    async def work(admin: Admin) -> tuple[TopicRouteData, list[TopicStatsTable], dict[str, int | None]]:
        route = await admin.route(topic)
        masters = sorted(master_addresses(route).items())
        stats = await asyncio.gather(*(get_topic_stats(admin.client, a, topic) for _, a in masters))
        infos = await asyncio.gather(*(get_runtime_info(admin.client, a) for _, a in masters))
        return (
            route,
            list(stats),
            {name: _half_messages(info, topic) for (name, _), info in zip(masters, infos, strict=True)},
        )

    route, stats, halves = run_admin(namesrv, work)
    out = console()
    for data in sorted(route.queue_datas, key=lambda q: q.broker_name):
        out.print(
            f"{topic} on {data.broker_name}: {data.read_queue_nums} read / {data.write_queue_nums} write queues, "
            f"perm {_perm(data.perm)}"
        )
    table = Table("broker", "queue", "min offset", "max offset", "messages", "last stored", show_footer=True)
    total_messages = 0
    for table_of_broker in stats:
        for queue, offsets in sorted(table_of_broker.offset_table.items()):
            messages = offsets.max_offset - offsets.min_offset
            total_messages += messages
            table.add_row(
                queue.broker_name,
                str(queue.queue_id),
                str(offsets.min_offset),
                str(offsets.max_offset),
                str(messages),
                format_time(offsets.last_update_timestamp),
            )
    table.columns[0].footer = "total"
    table.columns[4].footer = str(total_messages)
    for column in table.columns[1:5]:
        column.justify = "right"
    out.print(table)
    known = {name: count for name, count in halves.items() if count is not None}
    if known:
        per_broker = ", ".join(f"{name}: {count}" for name, count in known.items())
        out.print(f"half messages waiting for a commit or rollback: {sum(known.values())} ({per_broker})")


def _half_messages(runtime_info: dict[str, str], topic: str) -> int | None:
    """The topic's half messages not ended on a broker (None: the broker does not say, as Apache's)."""
    import orjson  # noqa: PLC0415

    raw = runtime_info.get("transactionHalfMessages")
    return None if raw is None else int(orjson.loads(raw).get(topic, 0))


def _perm(perm: int) -> str:
    from rocketspark.protocol.body.topic import Perm  # noqa: PLC0415

    return ("R" if perm & Perm.READ else "-") + ("W" if perm & Perm.WRITE else "-")


@topic_app.command("delete")
@client_command
def delete(topic: Annotated[str, typer.Argument(metavar="TOPIC", hidden=True)], namesrv: NamesrvOption) -> None:
    """Delete TOPIC from its brokers and the name servers.

    Its queues and consumer offsets go at once; its messages age out with their commit log segments.
    """
    from rocketspark.client.api.admin import delete_topic_in_broker, delete_topic_in_namesrv  # noqa: PLC0415
    from rocketspark.client.routes import master_addresses  # noqa: PLC0415

    async def work(admin: Admin) -> dict[str, str]:
        masters = master_addresses(await admin.route(topic))
        await asyncio.gather(*(delete_topic_in_broker(admin.client, a, topic) for a in masters.values()))
        for address in admin.namesrv_addrs:
            await delete_topic_in_namesrv(admin.client, address, topic)
        return masters

    masters = run_admin(namesrv, work)
    brokers = ", ".join(f"{name} ({address})" for name, address in sorted(masters.items()))
    console().print(f"deleted topic {topic} from {brokers}")


def register(app: typer.Typer) -> None:
    app.add_typer(topic_app, name="topic")
