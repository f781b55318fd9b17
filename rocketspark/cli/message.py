"""`rocketspark message show`: one stored message by its id, or the messages with a key."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import orjson
import typer
from rich.table import Table

from rocketspark.cli.common import (
    Admin,
    CliError,
    NamesrvOption,
    command_group,
    console,
    format_time,
    in_range,
    message_record,
    run_admin,
)
from rocketspark.cli.connection_options import client_command

if TYPE_CHECKING:
    from rocketspark.message.message import MessageExt

message_app = command_group("Look up stored messages.")


@message_app.command("show")
@client_command
def show(
    namesrv: NamesrvOption,
    msg_id: Annotated[str | None, typer.Argument(metavar="MSG_ID", hidden=True)] = None,
    key: Annotated[
        str | None, typer.Option("--key", "-k", metavar="KEY", help="messages with this key (needs --topic)")
    ] = None,
    topic: Annotated[str | None, typer.Option("--topic", "-t", metavar="TOPIC", help="the message's topic")] = None,
    max_messages: Annotated[
        int, typer.Option("--max", metavar="N", callback=in_range(1), help="at most this many messages per broker")
    ] = 32,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
) -> None:
    """Show a stored message by MSG_ID, or the messages with a key.

    MSG_ID is the broker's offset msgId, or with --topic the producer's msgId (its UNIQ_KEY).
    --key KEY --topic TOPIC shows the messages of TOPIC whose keys include KEY.
    """
    if (msg_id is None) == (key is None):
        raise typer.BadParameter("give a message id or --key, not both", param_hint="'MSG_ID' / '--key'")
    if key is not None and topic is None:
        raise typer.BadParameter("--key needs --topic", param_hint="'--topic'")

    async def work(admin: Admin) -> list[MessageExt]:
        if key is not None:
            assert topic is not None
            return await _by_key(admin, topic, key, max_messages, unique=False)
        assert msg_id is not None
        found = await _by_offset_id(admin, msg_id)
        if not found and topic is not None:
            found = await _by_key(admin, topic, msg_id, max_messages, unique=True)
        if not found:
            hint = "" if topic else "; pass --topic to look up a producer's msgId"
            raise CliError(f"no message with id {msg_id}{hint}")
        return found

    messages = run_admin(namesrv, work)
    if not messages:
        raise CliError(f"no message with key {key} in topic {topic}")
    out = console()
    for message in messages:
        if as_json:
            out.print(orjson.dumps(message_record(message)).decode(), soft_wrap=True, markup=False)
        else:
            out.print(_table(message))


async def _by_offset_id(admin: Admin, msg_id: str) -> list[MessageExt]:
    """VIEW_MESSAGE_BY_ID on the broker named inside an offset msgId ([] when it names none of ours)."""
    from rocketspark.client.lookup import by_offset_msg_id  # noqa: PLC0415

    return await by_offset_msg_id(admin.client, await admin.masters(), msg_id)


async def _by_key(admin: Admin, topic: str, key: str, max_num: int, *, unique: bool) -> list[MessageExt]:
    """QUERY_MESSAGE on every broker of the topic (by KEYS, or by UNIQ_KEY when `unique`)."""
    from rocketspark.client.lookup import by_key_on_broker, store_order  # noqa: PLC0415
    from rocketspark.client.routes import master_addresses  # noqa: PLC0415

    masters = master_addresses(await admin.route(topic))
    found = await asyncio.gather(
        *(
            by_key_on_broker(admin.client, name, address, topic, key, max_num=max_num, unique=unique)
            for name, address in sorted(masters.items())
        )
    )
    return sorted((m for ms in found for m in ms), key=store_order)


def _table(message: MessageExt) -> Table:
    record = message_record(message)
    table = Table("field", "value", show_header=False)
    table.add_row("topic", message.topic)
    table.add_row("queue", f"{message.broker_name} #{message.queue_id}, offset {message.queue_offset}")
    table.add_row("msg id", message.msg_id)
    table.add_row("offset msg id", message.offset_msg_id)
    table.add_row("tags", message.tags or "-")
    table.add_row("keys", message.keys or "-")
    table.add_row("born", f"{format_time(message.born_timestamp)} at {message.born_host}")
    table.add_row("stored", f"{format_time(message.store_timestamp)} at {message.store_host}")
    properties = record["properties"]
    assert isinstance(properties, dict)
    table.add_row("properties", ", ".join(f"{k}={v}" for k, v in sorted(properties.items())) or "-")
    table.add_row("body", str(record["body"]))
    return table


def register(app: typer.Typer) -> None:
    app.add_typer(message_app, name="message")
