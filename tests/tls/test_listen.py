"""Listening apart from publishing: a broker bound to every interface publishes one address."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rocketspark.client.api.route import get_route
from rocketspark.processes import ServerProcess
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory, dev_args
from tests.integration.broker_client import pull_all, send
from tests.sockets import LISTEN, socket_inodes, tcp_sockets
from tests.waiting import eventually


def refused(host: str, port: int) -> bool:
    """True when nothing listens on host:port (the kernel answers a connect with a reset at once)."""
    try:
        with socket.create_connection((host, port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


def listening_addresses(pid: int) -> set[str]:
    """The IPv4 addresses process `pid` listens on (a connect to another address of the same port
    could reach a server of a test running beside this one)."""
    inodes = socket_inodes(pid)
    return {s.local for s in tcp_sockets() if s.state == LISTEN and s.inode in inodes}


async def test_broker_listens_on_every_interface_and_publishes_its_host(
    servers: ServerFactory, remoting_client: RemotingClient
) -> None:
    namesrv = servers.namesrv("--listen", "0.0.0.0")
    published = servers.broker(namesrv.address, "--listen", "0.0.0.0", "--host", "127.0.0.2").address
    host, port = published.rsplit(":", 1)
    assert host == "127.0.0.2"
    route = await get_route(remoting_client, f"127.0.0.3:{namesrv.address.rsplit(':', 1)[1]}", "TBW102")
    assert [b.master_address for b in route.broker_datas] == [published]
    await send(remoting_client, published, "ListenTopic", b"over 127.0.0.2")
    assert [m.body for m in await pull_all(remoting_client, f"127.0.0.1:{port}", "ListenTopic", 0)] == [
        b"over 127.0.0.2"
    ]


def test_broker_conf_names_the_listen_address(servers: ServerFactory, tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerIP1=127.0.0.2\nbindAddress=127.0.0.2\n")
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address, "-c", str(conf))
    host, port = broker.address.rsplit(":", 1)
    assert host == "127.0.0.2"
    assert listening_addresses(broker.pid) == {f"127.0.0.2:{port}"}  # bound to 127.0.0.2 only


@pytest.mark.slow
async def test_cli_dev_binds_loopback_only(tmp_path: Path) -> None:
    process = ServerProcess(
        "rocketspark.cli",
        ["dev", *dev_args(tmp_path)],
        tmp_path / "dev.log",
    )
    namesrv = process.start()
    client = RemotingClient()
    try:
        route = await eventually(lambda: get_route(client, namesrv, "TBW102"), what="the broker's registration")
        broker = route.broker_datas[0].master_address
        assert broker is not None
        for address in (namesrv, broker):
            host, port = address.rsplit(":", 1)
            assert host == "127.0.0.1"
            assert not refused("127.0.0.1", int(port))
            assert refused("127.0.0.2", int(port))
    finally:
        await client.close()
        assert process.stop() == 0
