"""The dashboard's one admin session: a remoting client, the name servers (tried in turn) and the
brokers' answers, each broker's either an answer or the reason it gave none.

A page asks every master broker at once (`each_broker`) and shows what came back: a broker that
does not answer within the request timeout is shown unreachable beside the others. Brokers the
name servers stopped listing (a broker that died closes its registration connection, and the name
server forgets it at once) are remembered from earlier looks and shown as not registered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from rocketspark.client.api.route import get_cluster_info, get_route
from rocketspark.errors import RemotingError, RocketMQError, TopicNotExistError
from rocketspark.protocol.body.route import ClusterInfo, TopicRouteData
from rocketspark.remoting.client import RemotingClient

T = TypeVar("T")

#: requests in flight at once from one page (a cluster of many topics asks many questions)
MAX_IN_FLIGHT = 32


class NamesrvUnreachableError(RocketMQError):
    """No name server answered: nothing of the cluster can be shown."""


@dataclass(frozen=True, slots=True)
class BrokerFailure:
    """What a broker answered instead of the figures asked for."""

    name: str
    address: str
    reason: str

    def __str__(self) -> str:
        return f"{self.name} ({self.address}): {self.reason}"


@dataclass(frozen=True, slots=True)
class KnownBroker:
    name: str
    address: str
    cluster: str
    last_seen_ms: int


class ClusterAdmin:
    """Requests of the dashboard, shared by every page and the sampler."""

    def __init__(self, namesrv: tuple[str, ...], client_options: Mapping[str, Any], request_timeout_s: float) -> None:
        self.namesrv = namesrv
        self.request_timeout_s = request_timeout_s
        self.remoting = RemotingClient(
            connect_timeout_s=min(3.0, request_timeout_s), request_timeout_s=request_timeout_s, **client_options
        )
        self.known: dict[str, KnownBroker] = {}
        self._limit = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def on_namesrv(self, request: Callable[[RemotingClient, str], Awaitable[T]]) -> T:
        """`request(client, address)` on the first name server that answers."""
        failures = []
        for address in self.namesrv:
            try:
                return await self.limited(request(self.remoting, address))
            except RemotingError as exc:
                failures.append(f"{address}: {exc}")
        raise NamesrvUnreachableError(f"no name server answered ({'; '.join(failures)})")

    async def limited(self, work: Awaitable[T]) -> T:
        async with self._limit:
            return await work

    async def cluster(self) -> ClusterInfo:
        info = await self.on_namesrv(get_cluster_info)
        now = int(time.time() * 1000)
        cluster_of = {name: cluster for cluster, names in info.cluster_addr_table.items() for name in names}
        for name, data in info.broker_addr_table.items():
            if data.master_address:
                self.known[name] = KnownBroker(name, data.master_address, cluster_of.get(name, ""), now)
        return info

    async def masters(self) -> dict[str, str]:
        """Broker name -> master address of every broker the name servers list now."""
        info = await self.cluster()
        return {
            name: data.master_address for name, data in sorted(info.broker_addr_table.items()) if data.master_address
        }

    def gone(self, masters: Mapping[str, str]) -> list[KnownBroker]:
        """Brokers seen before that the name servers no longer list."""
        return [broker for name, broker in sorted(self.known.items()) if name not in masters]

    async def route(self, topic: str) -> TopicRouteData | None:
        """The topic's route; None when no broker serves it."""
        try:
            return await self.on_namesrv(lambda client, address: get_route(client, address, topic))
        except TopicNotExistError:
            return None

    async def each_broker(
        self, brokers: Mapping[str, str], ask: Callable[[str], Awaitable[T]]
    ) -> dict[str, T | BrokerFailure]:
        """`ask(address)` of every broker (name -> address) at once: its answer, or why none came."""

        async def one(name: str, address: str) -> T | BrokerFailure:
            try:
                return await self.limited(ask(address))
            except RocketMQError as exc:
                return BrokerFailure(name, address, str(exc))
            except TimeoutError:
                return BrokerFailure(name, address, f"no answer within {self.request_timeout_s:g} s")

        names = sorted(brokers)
        answers = await asyncio.gather(*(one(name, brokers[name]) for name in names))
        return dict(zip(names, answers, strict=True))

    async def close(self) -> None:
        await self.remoting.close()


def answered(answers: Mapping[str, T | BrokerFailure]) -> dict[str, T]:
    """The answers that came back, by broker name."""
    return {name: answer for name, answer in answers.items() if not isinstance(answer, BrokerFailure)}


def failures(answers: Mapping[str, object]) -> list[BrokerFailure]:
    return [answer for answer in answers.values() if isinstance(answer, BrokerFailure)]
