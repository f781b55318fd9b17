"""The optional extras and the check that names the missing one: PySpark comes with
`pip install 'rocketspark[spark]'` (the client library, the servers and the CLI need none of it)."""

from __future__ import annotations

import importlib.util

from rocketspark.errors import RocketMQError

SPARK_INSTALL = "pip install 'rocketspark[spark]'"


class MissingExtraError(RocketMQError, ModuleNotFoundError):
    """An optional dependency is not installed; the message names the command that installs it."""


def require_pyspark(what: str) -> None:
    """Raise MissingExtraError naming `what` when PySpark cannot be imported."""
    if importlib.util.find_spec("pyspark") is None:
        raise MissingExtraError(f"{what} needs PySpark, which is not installed: {SPARK_INSTALL}")
