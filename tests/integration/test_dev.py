"""`python -m rocketspark.dev`: name server and broker in one process."""

from __future__ import annotations

from pathlib import Path

from rocketspark.client.api.route import get_route
from rocketspark.processes import ServerProcess
from rocketspark.remoting.client import RemotingClient
from tests.harness import dev_args
from tests.integration.broker_client import pull_all, send
from tests.waiting import eventually


async def test_dev_runs_a_name_server_and_a_broker(tmp_path: Path) -> None:
    process = ServerProcess(
        "rocketspark.dev",
        dev_args(tmp_path),
        tmp_path / "dev.log",
    )
    namesrv = process.start()  # the first boot line is the name server's
    client = RemotingClient()
    try:
        route = await eventually(lambda: get_route(client, namesrv, "TBW102"), what="the broker's registration")
        broker = route.broker_datas[0].master_address
        assert broker is not None
        await send(client, broker, "DevTopic", b"hello")
        assert [m.body for m in await pull_all(client, broker, "DevTopic", 0)] == [b"hello"]
    finally:
        await client.close()
        assert process.stop() == 0
    assert (tmp_path / "store" / "commitlog").is_dir()
