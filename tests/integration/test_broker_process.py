"""Running the broker: broker.conf with Apache RocketMQ's keys, bad settings, clean shutdown."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rocketspark.client.api import admin, offset
from rocketspark.client.api.route import get_route
from rocketspark.errors import TopicNotExistError
from rocketspark.processes import ServerProcess
from rocketspark.remoting.client import RemotingClient
from tests.harness import ServerFactory
from tests.integration.broker_client import send
from tests.waiting import eventually

JAVA_STYLE_CONF = """\
# a broker.conf as Apache RocketMQ ships it
brokerClusterName = TestCluster
brokerName = broker-conf
brokerId = 0
deleteWhen = 04
fileReservedTime = 48
brokerRole = ASYNC_MASTER
flushDiskType = SYNC_FLUSH
autoCreateTopicEnable=true
"""


def run_broker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args], capture_output=True, text=True, timeout=60, check=False
    )


async def test_java_broker_conf_is_accepted(servers: ServerFactory, tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(JAVA_STYLE_CONF)
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address, "-c", str(conf), broker_name="broker-conf")
    client = RemotingClient()
    try:
        info = await admin.get_runtime_info(client, broker.address)
        assert info["flushDiskType"] == "SYNC_FLUSH"
        await send(client, broker.address, "ConfTopic", b"x")
        route = await eventually(lambda: get_route(client, namesrv.address, "ConfTopic"), what="a route")
        assert route.broker_datas[0].cluster == "TestCluster"
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ("brokerNmae = oops\n", "unknown setting in .*'brokerNmae' \\(did you mean brokerName"),
        ("listenPort = lots\n", "listenPort='lots'"),
        ("flushDiskType = SOMETIMES\n", "ASYNC_FLUSH, SYNC_FLUSH"),
        ("brokerRole = SLAVE\n", "master only"),
    ],
)
def test_bad_settings_are_clear_errors(tmp_path: Path, conf: str, message: str) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(conf)
    result = run_broker("-c", str(path), "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 2
    assert re.search(message, result.stderr), result.stderr


def test_unreadable_config_file(tmp_path: Path) -> None:
    result = run_broker("-c", str(tmp_path / "missing.conf"))
    assert result.returncode == 2 and "cannot read config file" in result.stderr


async def test_sigterm_unregisters_persists_and_exits_zero(servers: ServerFactory, tmp_path: Path) -> None:
    namesrv = servers.namesrv()
    data_dir = tmp_path / "broker-data"
    broker: ServerProcess = servers.broker(namesrv.address, data_dir=data_dir)
    client = RemotingClient()
    try:
        await send(client, broker.address, "Durable", b"x")
        await offset.update_consumer_offset(client, broker.address, "g", "Durable", 0, 1, oneway=False)
        await eventually(lambda: get_route(client, namesrv.address, "Durable"), what="a route")
        assert broker.stop() == 0
        with pytest.raises(TopicNotExistError):
            await get_route(client, namesrv.address, "Durable")  # unregistered on shutdown
        restarted = servers.broker(namesrv.address, data_dir=data_dir)
        assert (
            await offset.query_consumer_offset(
                client, restarted.address, "g", "Durable", 0, set_zero_if_not_found=False
            )
            == 1
        )
        assert await offset.get_max_offset(client, restarted.address, "Durable", 0) == 1
    finally:
        await client.close()


async def test_registers_with_every_name_server(servers: ServerFactory) -> None:
    first, second = servers.namesrv(), servers.namesrv()
    broker = servers.broker(f"{first.address};{second.address}")
    client = RemotingClient()
    try:
        await send(client, broker.address, "BothNamesrvs", b"x")
        for namesrv in (first, second):
            route = await eventually(lambda n=namesrv: get_route(client, n.address, "BothNamesrvs"), what="a route")
            assert route.broker_datas[0].master_address == broker.address
    finally:
        await client.close()
