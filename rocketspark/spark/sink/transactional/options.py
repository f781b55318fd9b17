"""The options of transactional writes: `transactional` and where the batch records go.

`transactionLog` names a directory every producer of the query can read (the driver's, for its
commits, and the executors', which answer the brokers' checks); by default the
`rocketmq-transactions` directory of the query's `checkpointLocation` (when given as an option).
Local paths only (a `file:` URI is taken as its path): the records are read with plain file I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from rocketspark.errors import ConfigError

#: the records' directory inside the checkpoint
CHECKPOINT_DIRECTORY = "rocketmq-transactions"


def _local(name: str, value: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme and parsed.scheme != "file" and len(parsed.scheme) > 1:  # not a Windows drive letter
        raise ConfigError(
            f"option {name}: {value!r} is not a local path; transactional writes keep their records with "
            "plain file I/O: set transactionLog to a directory every executor and the driver can read"
        )
    return str(Path(parsed.path if parsed.scheme else value).absolute())


def transaction_log_option(options: Mapping[str, str]) -> str | None:
    """Where the batch records go (options by lower-case name); None when no directory is named."""
    explicit = options.get("transactionlog")
    if explicit is not None:
        if not explicit.strip():
            raise ConfigError("option transactionLog: must not be empty")
        return _local("transactionLog", explicit.strip())
    checkpoint = options.get("checkpointlocation")
    if checkpoint:
        return str(Path(_local("checkpointLocation", checkpoint)) / CHECKPOINT_DIRECTORY)
    return None


def require_log(transaction_log: str | None) -> str:
    if transaction_log is None:
        raise ConfigError(
            "option transactional=true needs a directory for its batch records: set transactionLog, or "
            "checkpointLocation as an option of a streaming write"
        )
    return transaction_log
