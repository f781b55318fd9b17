"""The name server's `--write-allow-list` (issue 41, item 8): write requests from other addresses are
refused with NO_PERMISSION and change nothing; reads stay open; a listed broker registers."""

from __future__ import annotations

import pytest

from namesrv.startup import parse_args
from namesrv.write_guard import WRITE_CODES
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.namesrv import (
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    PutKVConfigRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
)
from tests.harness import ServerFactory
from tests.integration.raw_frames import RawConnection


async def test_writes_from_an_address_off_the_list_are_refused(servers: ServerFactory) -> None:
    namesrv = servers.namesrv("--write-allow-list", "10.9.9.9,192.168.0.0/16")
    writes = [
        RemotingCommand.request(RequestCode.PUT_KV_CONFIG, PutKVConfigRequestHeader("ns", "k", "v")),
        RemotingCommand.request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, WipeWritePermOfBrokerRequestHeader("broker-a")),
        RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, DeleteTopicFromNamesrvRequestHeader("T")),
    ]
    async with RawConnection(namesrv.address) as connection:
        for request in writes:
            refused = await connection.invoke(request)
            assert refused.code == ResponseCode.NO_PERMISSION
            assert "--write-allow-list" in (refused.remark or "")
        read = await connection.invoke(
            RemotingCommand.request(RequestCode.GET_KV_CONFIG, GetKVConfigRequestHeader("ns", "k"))
        )
        assert read.code == ResponseCode.QUERY_NOT_FOUND  # read, and the refused put stored nothing
    assert {RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.DELETE_KV_CONFIG} <= WRITE_CODES


def test_a_listed_broker_registers(servers: ServerFactory) -> None:
    namesrv = servers.namesrv("--write-allow-list", "127.0.0.1")
    servers.broker(namesrv.address)  # returns once registered with the name server


def test_an_unreadable_entry_stops_the_start(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--write-allow-list", "10.0.0.300"])
    assert "--write-allow-list: '10.0.0.300' is no address or network" in capsys.readouterr().err
