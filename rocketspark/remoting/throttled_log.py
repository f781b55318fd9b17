"""Log lines about what a peer sent, safe against a hostile peer: escaped, clipped and rate-limited.

A peer chooses every value of its requests: `escaped` turns control characters (a newline that
would start a forged log line) and non-ASCII into escapes and clips the text, and `ThrottledLog`
writes at most one line per interval for each kind of event, counting those it left out, so a flood
of refused requests cannot grow the log faster than a line per kind and interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

#: how long a peer's value may be in a log line or a refusal's remark
PEER_VALUE_MAX_CHARS = 200
DEFAULT_INTERVAL_S = 10.0


def escaped(value: object, max_chars: int = PEER_VALUE_MAX_CHARS) -> str:
    """`value` as printable ASCII (backslash escapes), at most `max_chars` characters and a note."""
    text = str(value).encode("unicode_escape").decode("ascii")
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}...({len(text) - max_chars} more)"


@dataclass(slots=True)
class _Window:
    logged_at: float
    suppressed: int = 0


class ThrottledLog:
    """At most one line per `interval_s` for each kind; the next line logged says how many were left out.

    Kinds are a small fixed set chosen by the caller (never a peer's value), so the table stays small.
    """

    def __init__(
        self,
        logger: logging.Logger,
        level: int = logging.INFO,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._level = level
        self._interval_s = interval_s
        self._clock = clock
        self._windows: dict[str, _Window] = {}

    def log(self, kind: str, message: str, *peer_values: object) -> None:
        """Log `message` %-formatted with `peer_values`, each escaped (so its placeholders are all `%s`),
        unless `kind` was logged less than an interval ago (then it is only counted)."""
        now = self._clock()
        window = self._windows.get(kind)
        if window is not None and now - window.logged_at < self._interval_s:
            window.suppressed += 1
            return
        suppressed = window.suppressed if window is not None else 0
        self._windows[kind] = _Window(now)
        if not self._logger.isEnabledFor(self._level):
            return
        line = message % tuple(escaped(value) for value in peer_values)
        if suppressed:
            line += f" ({suppressed} more {kind} not logged since the last such line)"
        self._logger.log(self._level, "%s", line)
