"""How the templates write figures: times, durations, rates, shares, counts."""

from __future__ import annotations

import datetime as dt
from urllib.parse import quote

from jinja2 import Environment


def when(timestamp_ms: int | None) -> str:
    """Local time to the second, or '-' for none."""
    if not timestamp_ms or timestamp_ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(timestamp_ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def share(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio * 100:.0f} %"


def count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def path_part(value: str) -> str:
    """A name as one segment of a URL path (topics may hold `%`)."""
    return quote(value, safe="")


def install(environment: Environment) -> None:
    environment.filters.update(when=when, duration=duration, rate=rate, share=share, count=count, path_part=path_part)
