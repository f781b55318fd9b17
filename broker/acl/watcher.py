"""Reloads the accounts file when it changes, as Apache RocketMQ's AclFileWatchService (every 500 ms).

A poll costs one `stat` on the event loop; a changed file (modification time, size or inode) is
read and parsed on a worker thread. A file that cannot be used (an empty one included: see
accounts.parse_acl) keeps the last good accounts and logs an ERROR naming the line and the reason,
once per change.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from broker.acl.accounts import AclConfig, AclFileError, load_acl
from broker.acl.validator import AccessValidator

log = logging.getLogger(__name__)

#: how often the file is looked at (Apache's AclFileWatchService: 500 ms)
POLL_INTERVAL_S = 0.5

_Stamp = tuple[int, int, int] | None


def _stamp(path: Path) -> _Stamp:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size, status.st_ino


class AclFileWatcher:
    """Loads `path` at construction (raising AclFileError) and, on each `poll`, again when it changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp = _stamp(path)
        self.validator = AccessValidator(load_acl(path))
        log.info("ACL on: %d account(s) from %s", len(self.validator.config.accounts), path)

    async def poll(self) -> None:
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            config: AclConfig = await asyncio.to_thread(lambda: load_acl(self.path, reload=True))
        except AclFileError as exc:
            log.error("%s; keeping the last good accounts", exc)  # noqa: TRY400 - the reason is the whole story
            return
        self.validator.config = config
        log.info("ACL accounts reloaded: %d account(s) from %s", len(config.accounts), self.path)


def accounts_file(plain_acl_file: str | None) -> Path:
    """broker.conf's `plainAclFile`, else `$ROCKETMQ_HOME/conf/plain_acl.yml` (Apache's place)."""
    if plain_acl_file:
        return Path(plain_acl_file).expanduser()
    home = os.environ.get("ROCKETMQ_HOME")
    if not home:
        raise AclFileError("aclEnable=true needs the accounts file: set plainAclFile in broker.conf, or ROCKETMQ_HOME")
    return Path(home) / "conf" / "plain_acl.yml"
