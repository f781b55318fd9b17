"""Client parts without servers: queue selection, offset stores, settings, ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketspark.client.config import ClientConfig
from rocketspark.client.consumer.offset_store import NO_OFFSET, LocalFileOffsetStore, ReadOffsetType
from rocketspark.client.instance import new_client_id
from rocketspark.client.producer.queue_selector import RoundRobinSelector, select_by_key
from rocketspark.errors import ConfigError, ValidationError
from rocketspark.message.hashing import java_string_hash
from rocketspark.message.validation import validate_client_group
from rocketspark.protocol.queue import MessageQueue

QUEUES = [MessageQueue("T", b, i) for b in ("broker-a", "broker-b") for i in range(2)]


def test_round_robin_skips_the_broker_that_just_failed() -> None:
    selector = RoundRobinSelector()
    picked = [selector.select(QUEUES) for _ in range(4)]  # each queue once, in order, from a random one
    first = QUEUES.index(picked[0])
    assert picked == QUEUES[first:] + QUEUES[:first]
    assert all(selector.select(QUEUES, "broker-a").broker_name == "broker-b" for _ in range(6))


@pytest.mark.parametrize(
    ("key", "java_hash"),
    [("order-1", -1207111310), ("Hello World", -862545276), ("TagA", 2598919), ("\u00e9t\u00e9", 227742)],
)
def test_sharding_key_picks_the_queue_java_picks(key: str, java_hash: int) -> None:
    assert java_string_hash(key) == java_hash
    # Java's SelectMessageQueueByHash: Math.abs(hashCode % size)
    java_rem = abs(java_hash) % len(QUEUES)
    assert select_by_key(QUEUES, key) == QUEUES[java_rem]


async def test_local_file_offset_store(tmp_path: Path) -> None:
    store = LocalFileOffsetStore(tmp_path, "group")
    queue, other = QUEUES[0], QUEUES[1]
    store.update_offset(queue, 10)
    store.update_offset(queue, 5)  # increase only
    assert await store.read_offset(queue, ReadOffsetType.READ_FROM_MEMORY) == 10
    store.update_offset(queue, 5, increase_only=False)  # a reset
    store.update_offset(other, 3)
    await store.persist_all([queue])  # drops queues no longer held
    reopened = LocalFileOffsetStore(tmp_path, "group")
    assert await reopened.read_offset(queue, ReadOffsetType.READ_FROM_STORE) == 5
    assert await reopened.read_offset(other, ReadOffsetType.READ_FROM_STORE) == NO_OFFSET
    assert await reopened.read_offset(other, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == NO_OFFSET


def test_name_servers_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAMESRV_ADDR", "10.0.0.1:9876;10.0.0.2:9876")
    assert ClientConfig().namesrv_addresses() == ("10.0.0.1:9876", "10.0.0.2:9876")
    assert ClientConfig(namesrv_addr="h:1").namesrv_addresses() == ("h:1",)
    monkeypatch.delenv("NAMESRV_ADDR")
    with pytest.raises(ConfigError, match="NAMESRV_ADDR"):
        ClientConfig().namesrv_addresses()
    with pytest.raises(ConfigError, match="not host:port"):
        ClientConfig(namesrv_addr="nohost").namesrv_addresses()
    with pytest.raises(ConfigError, match="positive"):
        ClientConfig(request_timeout_ms=0)


def test_client_ids_are_unique_in_one_process() -> None:
    made = {new_client_id("10.0.0.1", "DEFAULT") for _ in range(1000)}
    assert len(made) == 1000
    assert next(iter(made)).startswith("10.0.0.1@")
    assert new_client_id("10.0.0.1", "fixed") == "10.0.0.1@fixed"


@pytest.mark.parametrize(
    ("group", "message"),
    [("", "empty"), ("x" * 256, "at most 255"), ("bad group", "characters"), ("DEFAULT_PRODUCER", "reserved")],
)
def test_group_names_are_checked_as_rocketmq_does(group: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        validate_client_group(group)
