"""docs/protocol.md tells the truth about which request codes the servers serve.

Every code in the name server's, the broker's and the extensions' tables is sent, with an empty header
and body, to a real name server and broker; none may be answered REQUEST_CODE_NOT_SUPPORTED (a refusal
of the empty request is fine: it shows a processor is registered). Every code the page lists as not
implemented must be answered REQUEST_CODE_NOT_SUPPORTED.
"""

from __future__ import annotations

import re
from pathlib import Path

from rocketspark.protocol.codes import ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory

PROTOCOL = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", PROTOCOL, re.M | re.S)
    assert match, f"docs/protocol.md has no section {title!r}"
    return match.group(1)


def table_codes(text: str) -> list[int]:
    """The codes of the first table whose first column is `code` (a cell may hold `30, 31`)."""
    table = re.search(r"^\| code \|.*?\n((?:\|.*\n?)+)", text, re.M)
    assert table, "no table of codes"
    codes = []
    for row in table.group(1).splitlines()[1:]:  # skip the |---| line
        cell = row.split("|")[1]
        codes += [int(code) for code in re.findall(r"\d+", cell)]
    assert codes
    return codes


def not_implemented_codes() -> list[int]:
    paragraph = re.search(r"^Not implemented yet.*?\.(?=\s)", section("Broker"), re.M | re.S)  # one sentence
    assert paragraph, "docs/protocol.md lists no codes as not implemented"
    return [int(code) for code in re.findall(r"(?<![\w.])\d+(?![\w.])", paragraph.group(0))]  # not the 5 of 5.x


def test_the_parsed_lists_are_the_pages_lists() -> None:
    assert {103, 105, 327} <= set(table_codes(section("Name server")))
    assert {10, 11, 30, 31, 41, 42, 208} <= set(table_codes(section("Broker")))
    assert table_codes(section("Extensions")) == [31001, 31002, 31003, 31004, 31005]
    assert sorted(not_implemented_codes()) == [307]


async def unsupported(client: RemotingClient, address: str, codes: list[int]) -> list[int]:
    answers = {code: await client.invoke(address, RemotingCommand.request(code), timeout_s=5) for code in codes}
    return [code for code, answer in answers.items() if answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED]


async def test_documented_codes_are_served_and_the_others_are_not(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address)
    client = RemotingClient(request_timeout_s=5.0)
    try:
        assert await unsupported(client, namesrv.address, table_codes(section("Name server"))) == []
        broker_codes = table_codes(section("Broker")) + table_codes(section("Extensions"))
        assert await unsupported(client, broker.address, broker_codes) == []
        missing = not_implemented_codes()
        assert await unsupported(client, broker.address, missing) == missing
    finally:
        await client.close()
