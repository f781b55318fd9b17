"""What a Spark Python worker keeps per process is made again once its client stopped."""

from __future__ import annotations

from rocketspark.client.api import admin, client_manage
from rocketspark.client.lifecycle import ServiceState
from rocketspark.processes import ServerProcess
from rocketspark.protocol.body.topic import TopicConfig
from rocketspark.remoting.client import RemotingClient
from rocketspark.spark import cluster, options, reading
from rocketspark.spark.process_cache import ProcessCache
from tests.harness import ServerFactory
from tests.waiting import eventually


def test_an_object_that_is_no_longer_alive_is_made_again() -> None:
    made: list[list[bool]] = []

    def make() -> list[bool]:
        made.append([True])
        return made[-1]

    cache: ProcessCache[str, list[bool]] = ProcessCache(alive=lambda found: found[0])
    first = cache.get("k", make)
    assert cache.get("k", make) is first
    first[0] = False
    second = cache.get("k", make)
    assert second is not first and cache.get("k", make) is second and len(made) == 2


def test_a_puller_whose_client_stopped_is_made_again_with_a_running_client(namesrv: ServerProcess) -> None:
    source = options.parse({"nameServer": namesrv.address, "topic": "CacheT"}, streaming=False)
    first = reading.puller_for(source)
    assert reading.puller_for(source) is first
    cluster.run(first.instance.shutdown())
    assert first.instance.state is not ServiceState.RUNNING
    second = reading.puller_for(source)
    assert second is not first
    assert second.instance.state is ServiceState.RUNNING
    assert second.instance is cluster.source_instance(source)
    cluster.run(second.instance.shutdown())


def test_the_group_is_registered_again_with_a_client_made_again(servers: ServerFactory) -> None:
    """The source's consumer group heartbeats through the process's client: a client made again (the
    one before stopped) registers the group too, or RocketMQ's tools would not list it."""
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address)
    remoting = RemotingClient()
    cluster.run(admin.create_topic(remoting, broker.address, TopicConfig("GroupT", 1, 1)))
    source = options.parse(
        {"nameServer": namesrv.address, "topic": "GroupT", "consumerGroup": "cache_group"}, streaming=True
    )

    async def listed(client_id: str) -> bool:
        return await client_manage.get_consumer_list(remoting, broker.address, "cache_group") == [client_id]

    def register_once() -> None:
        client = cluster.source_instance(source)
        cluster.run(eventually(lambda: client.fetch_route("GroupT"), what="a route of GroupT"))
        cluster.keep_group_alive(source, lambda: ["GroupT"])
        cluster.run(eventually(lambda: listed(client.client_id), what=f"{client.client_id} as the group's member"))
        cluster.run(client.shutdown())

    try:
        register_once()
        register_once()  # with a client made again
    finally:
        cluster.run(remoting.close())
