"""The name server's KV config: PUT_KV_CONFIG (100), GET_KV_CONFIG (101), GET_KVLIST_BY_NAMESPACE (219)."""

from __future__ import annotations

from rocketspark.client.api.common import call
from rocketspark.protocol.body.kv import KVTable
from rocketspark.protocol.codes import RequestCode, ResponseCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.namesrv import (
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    PutKVConfigRequestHeader,
)
from rocketspark.remoting.client import RemotingClient


async def put_kv_config(
    client: RemotingClient, namesrv: str, namespace: str, key: str, value: str, timeout_s: float | None = None
) -> None:
    request = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, PutKVConfigRequestHeader(namespace, key, value))
    await call(client, namesrv, request, timeout_s)


async def get_kv_config(
    client: RemotingClient, namesrv: str, namespace: str, key: str, timeout_s: float | None = None
) -> str | None:
    """The value, or None when the name server has none (QUERY_NOT_FOUND)."""
    request = RemotingCommand.request(RequestCode.GET_KV_CONFIG, GetKVConfigRequestHeader(namespace, key))
    response = await call(
        client, namesrv, request, timeout_s, accept=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
    )
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    return response.decode_header(GetKVConfigResponseHeader).value


async def get_kv_list(
    client: RemotingClient, namesrv: str, namespace: str, timeout_s: float | None = None
) -> dict[str, str]:
    """Every key and value of the namespace ({} when it has none: QUERY_NOT_FOUND)."""
    request = RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE, GetKVListByNamespaceRequestHeader(namespace))
    response = await call(
        client, namesrv, request, timeout_s, accept=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
    )
    if response.code == ResponseCode.QUERY_NOT_FOUND or not response.body:
        return {}
    return KVTable.from_json(response.body).table
