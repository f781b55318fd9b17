"""Logging setup for the project's processes: levels, to stderr."""

from __future__ import annotations

import logging
import sys

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=level,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )
