"""The options of transactional writes: `transactional` and where the batch records go.

`transactionLog` names where the driver keeps the batch records (only the driver's Python workers
read and write them: listener.py); by default the `rocketmq-transactions` directory of the query's
`checkpointLocation` (when given as an option). A local path (a `file:` URI is one) or a URI of a
file system pyarrow opens (storage.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from rocketspark.errors import ConfigError
from rocketspark.spark.sink.transactional.storage import join, normalize

#: the records' directory inside the checkpoint
CHECKPOINT_DIRECTORY = "rocketmq-transactions"


def transaction_log_option(options: Mapping[str, str]) -> str | None:
    """Where the batch records go (options by lower-case name); None when no directory is named."""
    explicit = options.get("transactionlog")
    if explicit is not None:
        if not explicit.strip():
            raise ConfigError("option transactionLog: must not be empty")
        return normalize("transactionLog", explicit.strip())
    checkpoint = options.get("checkpointlocation")
    if checkpoint:
        return join(normalize("checkpointLocation", checkpoint.strip()), CHECKPOINT_DIRECTORY)
    return None


def require_log(transaction_log: str | None) -> str:
    if transaction_log is None:
        raise ConfigError(
            "option transactional=true needs a directory for its batch records: set transactionLog, or "
            "checkpointLocation as an option of a streaming write"
        )
    return transaction_log
