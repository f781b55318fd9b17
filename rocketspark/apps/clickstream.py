"""Synthetic clickstream events as Arrow tables for the Arrow send (`Producer.send_arrow`).

Each event is a JSON body `{"user": "user-42", "page": "/product/7", "price": 12.34,
"time": "2024-05-01T09:00:01.234Z"}` tagged `view`, `click` or `purchase`; event times are spread
over a few simulated hours with a daily-traffic-like curve, so some minutes are busier than others.
The generator keeps exact totals (prices in cents) to check what a query computed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TAGS = ("view", "click", "purchase")
TAG_WEIGHTS = (0.70, 0.25, 0.05)
PAGES = tuple(["/", "/search", "/cart", "/checkout"] + [f"/product/{i}" for i in range(1, 21)])
USERS = 10_000
#: the first simulated minute
START = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
#: the JSON schema of a body, for `from_json`
EVENT_SCHEMA = "user STRING, page STRING, price DECIMAL(10,2), time TIMESTAMP"


@dataclass(slots=True)
class Totals:
    """What was generated: counts per tag and the purchases' revenue in cents."""

    events: int = 0
    views: int = 0
    clicks: int = 0
    purchases: int = 0
    revenue_cents: int = 0

    def add(self, other: Totals) -> None:
        self.events += other.events
        self.views += other.views
        self.clicks += other.clicks
        self.purchases += other.purchases
        self.revenue_cents += other.revenue_cents


def minute_weights(minutes: int) -> np.ndarray:
    """A smooth traffic curve with two peaks over `minutes`, normalised to 1."""
    x = np.arange(minutes, dtype=np.float64)
    curve = 1.0 + 0.6 * np.sin(2 * math.pi * x / minutes) + 0.3 * np.sin(6 * math.pi * x / minutes + 1.0)
    weights = np.clip(curve, 0.1, None)
    normalised: np.ndarray = weights / weights.sum()
    return normalised


def batch_sizes(events: int, queues: int, max_rows: int) -> list[int]:
    """Rows per send: a multiple of `queues` sends (one queue each, round robin), none over `max_rows`."""
    rounds = max(1, math.ceil(events / (queues * max_rows)))
    sends = min(events, queues * rounds)
    base, extra = divmod(events, sends)
    return [base + (1 if i < extra else 0) for i in range(sends)]


def _text(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


def clickstream_table(rows: int, seed: int, hours: float = 3.0) -> tuple[pa.Table, Totals]:
    """`rows` events (columns `body` and `tags`) and their totals; the same seed gives the same events."""
    rng = np.random.default_rng(seed)
    minutes = max(1, round(hours * 60))
    minute = rng.choice(minutes, size=rows, p=minute_weights(minutes))
    start_ms = int(START.timestamp() * 1000)
    millis = start_ms + minute.astype(np.int64) * 60_000 + rng.integers(0, 60_000, size=rows)
    times = pc.strftime(pa.array(millis, pa.timestamp("ms", tz="UTC")), format="%Y-%m-%dT%H:%M:%SZ")
    tag_codes = rng.choice(len(TAGS), size=rows, p=TAG_WEIGHTS)
    cents = rng.integers(199, 20_000, size=rows)
    users = pc.binary_join_element_wise("user-", _text(rng.integers(0, USERS, size=rows)), "")
    pages = pa.array(PAGES).take(pa.array(rng.integers(0, len(PAGES), size=rows)))
    prices = pc.binary_join_element_wise(
        _text(cents // 100), pc.utf8_lpad(_text(cents % 100), width=2, padding="0"), "."
    )
    body = pc.binary_join_element_wise(
        '{"user":"', users, '","page":"', pages, '","price":', prices, ',"time":"', times, '"}', ""
    )
    tags = pa.array(TAGS).take(pa.array(tag_codes))
    counts = np.bincount(tag_codes, minlength=len(TAGS))
    totals = Totals(
        events=rows,
        views=int(counts[0]),
        clicks=int(counts[1]),
        purchases=int(counts[2]),
        revenue_cents=int(cents[tag_codes == 2].sum()),
    )
    return pa.table({"body": pc.cast(body, pa.binary()), "tags": tags}), totals


def clickstream(events: int, queues: int, max_rows: int = 50_000, seed: int = 7) -> Iterator[tuple[pa.Table, Totals]]:
    """The events in send-sized tables (see :func:`batch_sizes`)."""
    for index, rows in enumerate(batch_sizes(events, queues, max_rows)):
        yield clickstream_table(rows, seed * 1_000_003 + index)
