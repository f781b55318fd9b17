"""The charts' data, from the history: lines of (time, value) points that the page's script hands
to plotly.js (served from the installed `plotly` package, see rocketspark.dashboard.app).

- the cluster: messages in and out per second, per broker;
- a topic: messages in per minute (the growth of its max offsets between two samples, per minute);
- a group: its lag over time, per topic.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from rocketspark.dashboard.history import History

#: what a chart shows by default: the last 24 hours
DEFAULT_WINDOW_S = 24 * 3600


@dataclass(frozen=True, slots=True)
class Line:
    name: str
    points: list[tuple[int, float]]

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "x": [t for t, _ in self.points], "y": [v for _, v in self.points]}


def _since(window_s: float) -> int:
    return int((time.time() - window_s) * 1000)


async def cluster_lines(history: History, brokers: list[str], window_s: float = DEFAULT_WINDOW_S) -> list[Line]:
    lines = []
    for broker in brokers:
        for kind in ("in", "out"):
            points = (await history.series(kind, broker, _since(window_s))).get("", [])
            lines.append(Line(f"{broker} {kind}", points))
    return lines


def per_minute(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Growth between consecutive samples of a running total, per minute (none across a drop:
    the topic was created again)."""
    out = []
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t1 > t0 and v1 >= v0:
            out.append((t1, round((v1 - v0) * 60_000 / (t1 - t0), 3)))
    return out


async def topic_lines(history: History, topic: str, window_s: float = DEFAULT_WINDOW_S) -> list[Line]:
    points = (await history.series("stored", topic, _since(window_s))).get("", [])
    return [Line("messages in per minute", per_minute(points))]


async def group_lines(history: History, group: str, window_s: float = DEFAULT_WINDOW_S) -> list[Line]:
    series = await history.series("lag", group, _since(window_s))
    return [Line(f"lag on {topic}", points) for topic, points in sorted(series.items())]
