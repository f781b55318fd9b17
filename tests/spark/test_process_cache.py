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


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_objects_idle_for_the_bound_are_closed_and_those_in_use_are_not() -> None:
    clock = FakeClock()
    closed: list[str] = []
    cache: ProcessCache[str, str] = ProcessCache(alive=lambda _: True, close=closed.append, idle_s=600, clock=clock)
    assert cache.get("old", lambda: "old-1") == "old-1"
    with cache.using("busy", lambda: "busy-1"):
        clock.now = 599.0
        cache.get("other", lambda: "other-1")
        assert closed == []  # not idle long enough
        clock.now = 1_000.0
        cache.get("other", lambda: "other-2")
        assert closed == ["old-1"]  # "busy" is in use, however long ago it was taken
    clock.now = 1_599.0
    assert cache.get("busy", lambda: "busy-2") == "busy-1"  # used until 1,000: not idle for 600 s yet
    clock.now = 2_200.0
    assert cache.get("old", lambda: "old-2") == "old-2"  # made again after it was closed
    assert closed == ["old-1", "busy-1", "other-1"]


def test_a_cache_without_a_bound_closes_nothing() -> None:
    clock = FakeClock()
    cache: ProcessCache[str, str] = ProcessCache(alive=lambda _: True, clock=clock)
    first = cache.get("k", lambda: "first")
    clock.now = 1e9
    assert cache.get("k", lambda: "second") is first
