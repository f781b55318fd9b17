"""What the dashboard samples while it runs (every `--sample-interval` seconds) into its history:
per broker the messages in and out per second (from the differences of its `msgPutTotalTodayNow`
and `msgGetTotalTodayNow` totals between two samples), per topic the sum of its queues' max
offsets, per group and topic the lag.

A broker that does not answer is skipped for that round (its chart has a gap there).
"""

from __future__ import annotations

import asyncio
import logging
import time

from rocketspark.client.api.admin import (
    get_all_consumer_offsets,
    get_runtime_info,
    get_topic_stats,
)
from rocketspark.client.api.route import get_all_topics
from rocketspark.dashboard.admin import ClusterAdmin, answered
from rocketspark.dashboard.group_view import group_stats
from rocketspark.dashboard.history import History, Sample
from rocketspark.errors import RocketMQError
from rocketspark.message.validation import is_system_topic
from rocketspark.service import PeriodicService

log = logging.getLogger(__name__)


class Sampler:
    def __init__(self, admin: ClusterAdmin, history: History, interval_s: float) -> None:
        self.admin = admin
        self.history = history
        self.service = PeriodicService("dashboard-sampler", interval_s, self.sample, initial_delay_s=0)
        self._totals: dict[str, tuple[int, int, int]] = {}  # broker -> (time, put total, get total)
        self.rounds = 0

    def start(self) -> None:
        self.service.start()

    async def stop(self) -> None:
        await self.service.stop()

    async def sample(self) -> None:
        try:
            samples = await self._take()
        except RocketMQError as exc:  # no name server answered: nothing to sample this round
            log.warning("dashboard sampling skipped: %s", exc)
            return
        now = int(time.time() * 1000)
        await self.history.add(samples, now)
        self.rounds += 1

    async def _take(self) -> list[Sample]:
        admin = self.admin
        masters = await admin.masters()
        runtime, offsets = await asyncio.gather(
            admin.each_broker(masters, lambda a: get_runtime_info(admin.remoting, a)),
            admin.each_broker(masters, lambda a: get_all_consumer_offsets(admin.remoting, a)),
        )
        now = int(time.time() * 1000)
        samples = self._rates(answered(runtime), now)
        pairs = {pair for table in answered(offsets).values() for pair in table}
        groups = sorted({group for _, group in pairs})
        topics = sorted({topic for topic, _ in pairs if not is_system_topic(topic)} | set(await self._user_topics()))

        async def stored(topic: str) -> Sample | None:
            route = await admin.route(topic)
            if route is None:
                return None
            brokers = {q.broker_name: masters[q.broker_name] for q in route.queue_datas if q.broker_name in masters}
            tables = answered(await admin.each_broker(brokers, lambda a: get_topic_stats(admin.remoting, a, topic)))
            total = sum(o.max_offset for t in tables.values() for o in t.offset_table.values())
            return Sample("stored", topic, "", now, total)

        async def lag(group: str) -> list[Sample]:
            stats, _ = await group_stats(admin, masters, group)
            by_topic: dict[str, int] = {}
            for s in stats:
                for queue, w in s.offset_table.items():
                    by_topic[queue.topic] = by_topic.get(queue.topic, 0) + max(0, w.broker_offset - w.consumer_offset)
            return [Sample("lag", group, topic, now, value) for topic, value in sorted(by_topic.items())]

        for found in await asyncio.gather(*(stored(t) for t in topics)):
            if found is not None:
                samples.append(found)
        for found_lags in await asyncio.gather(*(lag(g) for g in groups)):
            samples.extend(found_lags)
        return samples

    async def _user_topics(self) -> list[str]:
        hidden = set(self.admin.known) | {b.cluster for b in self.admin.known.values()}
        names = await self.admin.on_namesrv(get_all_topics)
        return [n for n in names if not is_system_topic(n) and n not in hidden]

    def _rates(self, runtime: dict[str, dict[str, str]], now: int) -> list[Sample]:
        samples = []
        for broker, info in runtime.items():
            try:
                put, get = int(info.get("msgPutTotalTodayNow", "")), int(info.get("msgGetTotalTodayNow", ""))
            except ValueError:
                continue
            before = self._totals.get(broker)
            self._totals[broker] = (now, put, get)
            if before is None or now <= before[0] or put < before[1] or get < before[2]:
                continue  # the first sample, or the broker restarted: no rate yet
            elapsed = (now - before[0]) / 1000
            samples.append(Sample("in", broker, "", now, (put - before[1]) / elapsed))
            samples.append(Sample("out", broker, "", now, (get - before[2]) / elapsed))
        return samples
