"""Administration RPCs: topics, consumer groups, statistics, runtime figures, message lookup."""

from __future__ import annotations

import orjson

from rocketspark.client.api.common import call
from rocketspark.message.validation import DEFAULT_MAX_RECONSUME_TIMES
from rocketspark.protocol.body.consumer import ConsumerConnection
from rocketspark.protocol.body.kv import KVTable
from rocketspark.protocol.body.stats import BrokerStatsData, ConsumeStats, ResetOffsetBody, TopicStatsTable
from rocketspark.protocol.body.topic import TopicConfig, TopicConfigSerializeWrapper
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.admin import (
    CreateTopicRequestHeader,
    GetConsumeStatsRequestHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    TopicRequestHeader,
    ViewBrokerStatsDataRequestHeader,
    ViewMessageRequestHeader,
)
from rocketspark.protocol.headers.client import ConsumerGroupRequestHeader
from rocketspark.protocol.headers.namesrv import DeleteTopicFromNamesrvRequestHeader
from rocketspark.remoting.client import RemotingClient
from rocketspark.remoting.signing import UNIQUE_KEY_QUERY


async def create_topic(
    client: RemotingClient, broker_addr: str, config: TopicConfig, timeout_s: float | None = None
) -> None:
    header = CreateTopicRequestHeader(
        topic=config.topic_name,
        default_topic="TBW102",
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        topic_filter_type=config.topic_filter_type.name,
        topic_sys_flag=config.topic_sys_flag,
        order=config.order,
    )
    await call(client, broker_addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header), timeout_s)


async def delete_topic_in_broker(
    client: RemotingClient, broker_addr: str, topic: str, timeout_s: float | None = None
) -> None:
    request = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, TopicRequestHeader(topic))
    await call(client, broker_addr, request, timeout_s)


async def delete_topic_in_namesrv(
    client: RemotingClient, namesrv: str, topic: str, timeout_s: float | None = None
) -> None:
    request = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, DeleteTopicFromNamesrvRequestHeader(topic))
    await call(client, namesrv, request, timeout_s)


async def get_all_topic_config(
    client: RemotingClient, broker_addr: str, timeout_s: float | None = None
) -> TopicConfigSerializeWrapper:
    response = await call(client, broker_addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), timeout_s)
    return TopicConfigSerializeWrapper.from_json(response.body)


async def get_topic_stats(
    client: RemotingClient, broker_addr: str, topic: str, timeout_s: float | None = None
) -> TopicStatsTable:
    request = RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, TopicRequestHeader(topic))
    response = await call(client, broker_addr, request, timeout_s)
    return TopicStatsTable.from_json(response.body)


async def get_consume_stats(
    client: RemotingClient, broker_addr: str, group: str, topic: str | None = None, timeout_s: float | None = None
) -> ConsumeStats:
    request = RemotingCommand.request(RequestCode.GET_CONSUME_STATS, GetConsumeStatsRequestHeader(group, topic))
    response = await call(client, broker_addr, request, timeout_s)
    return ConsumeStats.from_json(response.body)


async def create_subscription_group(
    client: RemotingClient,
    broker_addr: str,
    group: str,
    *,
    retry_max_times: int = DEFAULT_MAX_RECONSUME_TIMES,
    consume_message_orderly: bool = False,
    timeout_s: float | None = None,
) -> None:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), as `mqadmin updateSubGroup` sends it: a group whose
    messages are retried `retry_max_times` times (5.x consumers: that many + 1 delivery attempts), and
    whose 5.x consumers are FIFO consumers with `consume_message_orderly`."""
    body = {
        "groupName": group,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeBroadcastEnable": True,
        "consumeMessageOrderly": consume_message_orderly,
        "retryQueueNums": 1,
        "retryMaxTimes": retry_max_times,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
    }
    request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(body))
    await call(client, broker_addr, request, timeout_s)


async def get_subscription_groups(
    client: RemotingClient, broker_addr: str, timeout_s: float | None = None
) -> list[str]:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): the names of the broker's subscription groups."""
    request = RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    response = await call(client, broker_addr, request, timeout_s)
    return sorted(orjson.loads(response.body or b"{}").get("subscriptionGroupTable") or {})


async def get_all_consumer_offsets(
    client: RemotingClient, broker_addr: str, timeout_s: float | None = None
) -> dict[tuple[str, str], dict[int, int]]:
    """GET_ALL_CONSUMER_OFFSET (43): (topic, group) -> queue id -> the group's committed offset."""
    response = await call(client, broker_addr, RemotingCommand.request(RequestCode.GET_ALL_CONSUMER_OFFSET), timeout_s)
    table = orjson.loads(response.body or b"{}").get("offsetTable") or {}
    offsets: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in table.items():
        topic, _, group = key.rpartition("@")
        offsets[topic, group] = {int(queue_id): int(offset) for queue_id, offset in queues.items()}
    return offsets


async def get_runtime_info(client: RemotingClient, broker_addr: str, timeout_s: float | None = None) -> dict[str, str]:
    response = await call(client, broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout_s)
    return KVTable.from_json(response.body).table


async def query_message(
    client: RemotingClient,
    broker_addr: str,
    topic: str,
    key: str,
    *,
    max_num: int = 32,
    begin_ms: int = 0,
    end_ms: int = 2**62,
    unique_key: bool = False,
    timeout_s: float | None = None,
) -> bytes:
    """Standard records of the messages of `topic` with `key` (QueryNotFoundError if none)."""
    request = RemotingCommand.request(
        RequestCode.QUERY_MESSAGE, QueryMessageRequestHeader(topic, key, max_num, begin_ms, end_ms)
    )
    if unique_key:
        request.ext_fields[UNIQUE_KEY_QUERY] = "true"
    return (await call(client, broker_addr, request, timeout_s)).body


async def view_message(
    client: RemotingClient, broker_addr: str, commit_log_offset: int, timeout_s: float | None = None
) -> bytes:
    request = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(commit_log_offset))
    return (await call(client, broker_addr, request, timeout_s)).body


async def view_broker_stats(
    client: RemotingClient, broker_addr: str, name: str, key: str, timeout_s: float | None = None
) -> BrokerStatsData:
    """VIEW_BROKER_STATS_DATA (315): a stats item (TOPIC_PUT_NUMS of a topic, ...) over the last
    minute, hour and day; ServerSystemError when the broker has no such item."""
    request = RemotingCommand.request(RequestCode.VIEW_BROKER_STATS_DATA, ViewBrokerStatsDataRequestHeader(name, key))
    return BrokerStatsData.from_json((await call(client, broker_addr, request, timeout_s)).body)


async def get_consumer_connections(
    client: RemotingClient, broker_addr: str, group: str, timeout_s: float | None = None
) -> ConsumerConnection | None:
    """GET_CONSUMER_CONNECTION_LIST (203): the group's members online; None when none is
    (CONSUMER_NOT_ONLINE)."""
    request = RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST, ConsumerGroupRequestHeader(group))
    response = await call(
        client, broker_addr, request, timeout_s, accept=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE)
    )
    return None if response.code == ResponseCode.CONSUMER_NOT_ONLINE else ConsumerConnection.from_json(response.body)


async def invoke_reset_offset(
    client: RemotingClient,
    broker_addr: str,
    topic: str,
    group: str,
    timestamp_ms: int,
    *,
    force: bool = True,
    timeout_s: float | None = None,
) -> ResetOffsetBody | None:
    """INVOKE_BROKER_TO_RESET_OFFSET (222): the broker tells the group's members online to reset to
    `timestamp_ms` (-1: the max offsets) and answers the offsets; None when no member is online
    (CONSUMER_NOT_ONLINE: nothing was reset)."""
    header = ResetOffsetRequestHeader(topic, group, timestamp_ms, force)
    request = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
    response = await call(
        client, broker_addr, request, timeout_s, accept=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE)
    )
    return None if response.code == ResponseCode.CONSUMER_NOT_ONLINE else ResetOffsetBody.from_json(response.body)


async def get_broker_config(client: RemotingClient, broker_addr: str, timeout_s: float | None = None) -> dict[str, str]:
    """GET_BROKER_CONFIG (26): the broker's settings, from its `key=value` lines."""
    response = await call(client, broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG), timeout_s)
    settings = {}
    for line in (response.body or b"").decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.lstrip().startswith("#"):
            settings[key.strip()] = value.strip()
    return settings
