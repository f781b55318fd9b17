"""Client registration RPCs: heartbeats, unregistration, group members, orderly queue locks."""

from __future__ import annotations

from collections.abc import Iterable

from rocketspark.client.api.common import call
from rocketspark.protocol.body.consumer import ConsumerListBody, LockBatchRequestBody, LockBatchResponseBody
from rocketspark.protocol.body.heartbeat import HeartbeatData
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.client import ConsumerGroupRequestHeader, UnregisterClientRequestHeader
from rocketspark.protocol.queue import MessageQueue
from rocketspark.remoting.client import RemotingClient


async def send_heartbeat(
    client: RemotingClient, broker_addr: str, heartbeat: HeartbeatData, timeout_s: float | None = None
) -> int:
    """Register the client's groups with a broker; returns the broker's protocol version."""
    request = RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat.to_json())
    response = await call(client, broker_addr, request, timeout_s)
    return response.version


async def unregister_client(
    client: RemotingClient,
    broker_addr: str,
    client_id: str,
    *,
    producer_group: str | None = None,
    consumer_group: str | None = None,
    timeout_s: float | None = None,
) -> None:
    header = UnregisterClientRequestHeader(client_id, producer_group, consumer_group)
    await call(client, broker_addr, RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, header), timeout_s)


async def get_consumer_list(
    client: RemotingClient, broker_addr: str, group: str, timeout_s: float | None = None
) -> list[str]:
    request = RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, ConsumerGroupRequestHeader(group))
    response = await call(client, broker_addr, request, timeout_s)
    return ConsumerListBody.from_json(response.body).consumer_id_list


async def lock_batch(
    client: RemotingClient,
    broker_addr: str,
    group: str,
    client_id: str,
    queues: Iterable[MessageQueue],
    timeout_s: float | None = None,
) -> list[MessageQueue]:
    """Lock queues for orderly consumption; returns those this client now holds."""
    body = LockBatchRequestBody(group, client_id, list(queues))
    response = await call(
        client, broker_addr, RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body.to_json()), timeout_s
    )
    return LockBatchResponseBody.from_json(response.body).lock_ok_mq_set


async def unlock_batch(
    client: RemotingClient,
    broker_addr: str,
    group: str,
    client_id: str,
    queues: Iterable[MessageQueue],
    timeout_s: float | None = None,
) -> None:
    body = LockBatchRequestBody(group, client_id, list(queues))
    await call(
        client, broker_addr, RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=body.to_json()), timeout_s
    )
