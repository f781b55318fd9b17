"""RouteInfoManager as a pure state machine, with a controllable clock."""

from __future__ import annotations

from namesrv.route_info_manager import RegisterBrokerResult, RouteInfoManager
from rocketspark.protocol.body.topic import DataVersion, TopicConfig, TopicConfigSerializeWrapper


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Channel:
    def __init__(self) -> None:
        self.closed_reason: str | None = None

    def close(self, reason: str) -> None:
        self.closed_reason = reason


def wrapper(counter: int, **topics: int) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        {t: TopicConfig(t, n, n) for t, n in topics.items()}, DataVersion(counter, 0, counter)
    )


def register(
    manager: RouteInfoManager,
    name: str,
    addr: str,
    channel: object,
    *,
    counter: int = 1,
    broker_id: int = 0,
    cluster: str = "c",
    timeout_ms: int | None = None,
    **topics: int,
) -> RegisterBrokerResult:
    return manager.register_broker(
        cluster=cluster,
        broker_addr=addr,
        broker_name=name,
        broker_id=broker_id,
        ha_server_addr=addr,
        topic_config_wrapper=wrapper(counter, **topics),
        filter_server_list=[],
        channel=channel,
        timeout_ms=timeout_ms,
    )


def test_queue_data_rebuilt_only_when_data_version_changes() -> None:
    manager = RouteInfoManager()
    channel = Channel()
    register(manager, "a", "h:1", channel, counter=1, T=4)
    manager.topic_queue_table["T"]["a"].perm = 2  # a local change the same version must not undo
    register(manager, "a", "h:1", channel, counter=1, T=8)
    assert manager.topic_queue_table["T"]["a"].read_queue_nums == 4
    register(manager, "a", "h:1", channel, counter=2, T=8)
    assert manager.topic_queue_table["T"]["a"].read_queue_nums == 8


def test_expiry_uses_per_broker_timeout_and_closes_channel() -> None:
    clock = Clock()
    manager = RouteInfoManager(broker_expired_ms=10_000, clock=clock)
    slow, fast = Channel(), Channel()
    register(manager, "a", "h:1", slow, T=4)
    register(manager, "b", "h:2", fast, timeout_ms=1_000, T=4)
    clock.now += 5_000
    assert manager.scan_not_active_brokers() == ["h:2"]
    assert fast.closed_reason is not None and slow.closed_reason is None
    assert [b.broker_name for b in manager.pickup_topic_route_data("T").broker_datas] == ["a"]  # type: ignore[union-attr]
    clock.now += 6_000
    assert manager.scan_not_active_brokers() == ["h:1"]
    assert manager.pickup_topic_route_data("T") is None
    assert manager.cluster_info().cluster_addr_table == {}


def test_channel_destroy_removes_only_that_broker() -> None:
    manager = RouteInfoManager()
    a, b = Channel(), Channel()
    register(manager, "a", "h:1", a, T=4, OnlyA=1)
    register(manager, "b", "h:2", b, T=4)
    manager.on_channel_destroy(a)
    assert manager.all_topics() == ["T"]
    assert list(manager.broker_addr_table) == ["b"]


def test_slave_promoted_to_master_keeps_one_entry_per_address() -> None:
    manager = RouteInfoManager()
    channel = Channel()
    register(manager, "a", "h:1", channel, T=4)
    register(manager, "a", "h:2", Channel(), broker_id=1, T=4)
    register(manager, "a", "h:2", Channel(), broker_id=0, counter=2, T=4)
    assert manager.broker_addr_table["a"].broker_addrs == {0: "h:2"}


def test_delete_topic_in_one_cluster() -> None:
    manager = RouteInfoManager()
    register(manager, "a", "h:1", Channel(), cluster="c1", T=4)
    register(manager, "b", "h:2", Channel(), cluster="c2", T=4)
    manager.delete_topic("T", "c1")
    assert list(manager.topic_queue_table["T"]) == ["b"]
    assert manager.topics_by_cluster("c1") == []
    manager.delete_topic("T")
    assert manager.all_topics() == []
