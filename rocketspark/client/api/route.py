"""Name-server RPCs: routes, cluster info, topic lists."""

from __future__ import annotations

from rocketspark.client.api.common import call
from rocketspark.protocol.body.route import ClusterInfo, TopicRouteData
from rocketspark.protocol.body.topic import TopicList
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.namesrv import GetRouteInfoRequestHeader
from rocketspark.remoting.client import RemotingClient


async def get_route(client: RemotingClient, namesrv: str, topic: str, timeout_s: float | None = None) -> TopicRouteData:
    """The topic's route; TopicNotExistError when no broker serves it."""
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic, True))
    response = await call(client, namesrv, request, timeout_s)
    return TopicRouteData.from_json(response.body)


async def get_cluster_info(client: RemotingClient, namesrv: str, timeout_s: float | None = None) -> ClusterInfo:
    response = await call(client, namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), timeout_s)
    return ClusterInfo.from_json(response.body)


async def get_all_topics(client: RemotingClient, namesrv: str, timeout_s: float | None = None) -> list[str]:
    request = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    response = await call(client, namesrv, request, timeout_s)
    return TopicList.from_json(response.body).topic_list
