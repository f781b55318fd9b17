"""`rocketspark consume --group` commits what it printed, `group progress` and `group list` show it:
the real command (a subprocess) against a name server and a broker the test starts."""

from __future__ import annotations

import re

import orjson
import pytest

from rocketspark import LitePullConsumer
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.sync import SyncRemotingClient
from tests.cli.conftest import Result, run_cli
from tests.harness import ServerFactory


def rows(result: Result) -> list[list[str]]:
    """A rich table's body rows as cells (borders dropped)."""
    return [cells for line in result.out.splitlines() if len(cells := re.split(r"\s*│\s*", line.strip("│ "))) > 1]


def test_consume_with_a_group_commits_what_it_printed(cluster: str) -> None:
    assert run_cli("topic", "create", "Life", "--queues", "1", namesrv=cluster).code == 0
    sent = run_cli("produce", "Life", "--tags", "a", stdin="m0\nm1\nm2\nm3\nm4\n", namesrv=cluster)
    assert (sent.code, sent.out) == (0, "sent 5 messages to Life\n")

    unnamed = run_cli("consume", "Life", "--offset", "earliest", "--max", "2", "--timeout", "5", namesrv=cluster)
    assert unnamed.code == 0 and unnamed.out.count("Life") == 0 and "m1" in unnamed.out
    assert "has no committed offsets" in run_cli("group", "progress", "life-app", namesrv=cluster).err

    first = run_cli("consume", "Life", "--group", "life-app", "--offset", "earliest", "--max", "3", namesrv=cluster)
    assert first.code == 0, first.err
    assert [line.split()[-1] for line in first.out.splitlines()[1:]] == ["m0", "m1", "m2"]
    assert "committed for group life-app" in first.err
    progress = run_cli("group", "progress", "life-app", namesrv=cluster)
    assert progress.code == 0, progress.err
    assert rows(progress) == [["Life", "broker-a", "0", "3", "5", "2"], ["total", "", "", "3", "5", "2"]]

    listed = run_cli("group", "list", namesrv=cluster)
    assert listed.code == 0, listed.err
    assert ["life-app", "0", "Life", "2"] in rows(listed)
    assert not any(row[0] == "rocketspark-cli-consumer" for row in rows(listed))  # read without --group

    resumed = run_cli("consume", "Life", "-g", "life-app", "--timeout", "2", namesrv=cluster)  # where it left off
    assert [line.split()[-1] for line in resumed.out.splitlines()[1:]] == ["m3", "m4"]
    progress = run_cli("group", "progress", "life-app", "--topic", "Life", namesrv=cluster)
    assert rows(progress)[-1] == ["total", "", "", "5", "5", "0"]


def test_group_list_counts_the_clients_online(cluster: str) -> None:
    assert run_cli("group", "list", namesrv=cluster).out == "no consumer groups\n"
    assert run_cli("topic", "create", "Online", "--queues", "1", namesrv=cluster).code == 0
    with LitePullConsumer("online-app", namesrv_addr=cluster) as consumer:
        consumer.subscribe("Online")
        consumer.poll(timeout_ms=500)
        listed = run_cli("group", "list", namesrv=cluster)
        assert listed.code == 0, listed.err
        assert [row[:2] for row in rows(listed) if row[0] == "online-app"] == [["online-app", "1"]]


@pytest.mark.slow
def test_group_create_sets_the_retries_and_the_order(servers: ServerFactory) -> None:
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address)
    created = run_cli("group", "create", "fifo-app", "--orderly", "--retry-max-times", "3", namesrv=namesrv.address)
    assert created.code == 0, created.err
    assert created.out == f"created orderly consumer group fifo-app on broker-a ({broker.address}): 3 retries\n"
    with SyncRemotingClient() as client:
        request = RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        answer = client.invoke(broker.address, request, timeout_s=5)
    config = orjson.loads(answer.body)["subscriptionGroupTable"]["fifo-app"]
    assert (config["retryMaxTimes"], config["consumeMessageOrderly"]) == (3, True)

    refused = run_cli("group", "create", "no spaces", namesrv=namesrv.address)
    assert refused.code == 2 and "GROUP" in refused.err
