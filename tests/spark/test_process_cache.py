"""What a Spark Python worker keeps per process is made again once its client stopped."""

from __future__ import annotations

from rocketspark.client.lifecycle import ServiceState
from rocketspark.processes import ServerProcess
from rocketspark.spark import cluster, options
from rocketspark.spark.process_cache import ProcessCache
from rocketspark.spark.source import reading


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
