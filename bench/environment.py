"""What the figures were measured on."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def describe() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(memory_bytes() / 2**30, 1),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "pyspark": _version("pyspark"),
        "pyarrow": _version("pyarrow"),
        "rocketspark": _version("rocketspark"),
    }
