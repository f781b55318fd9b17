"""Fixtures of the ACL tests: an accounts file and a name server plus a broker with `aclEnable=true`.

`ACCOUNTS` is the file the broker starts with; tests that change it rewrite `AclBroker.acl_file`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocketspark.processes import ServerProcess
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.signing import SessionCredentials, sign
from tests.harness import ServerFactory

#: may publish and subscribe everywhere but DeniedTopic (DENY), ReadOnlyTopic (SUB) and denied_group (DENY)
USER = SessionCredentials("rocketspark_user", "user-secret-123")
ADMIN = SessionCredentials("rocketspark_admin", "admin-secret-456")
#: signs nothing: its white list holds 127.0.0.1, the address every test client connects from
TRUSTED_KEY = "trusted_local"
DENIED_TOPIC = "DeniedTopic"
READ_ONLY_TOPIC = "ReadOnlyTopic"
DENIED_GROUP = "denied_group"

ACCOUNTS = f"""
globalWhiteRemoteAddresses:

accounts:
  - accessKey: {USER.access_key}
    secretKey: {USER.secret_key}
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms:
      - {DENIED_TOPIC}=DENY
      - {READ_ONLY_TOPIC}=SUB
    groupPerms:
      - {DENIED_GROUP}=DENY

  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true

  - accessKey: {TRUSTED_KEY}
    secretKey: never-checked
    whiteRemoteAddress: 127.0.0.1
    defaultTopicPerm: DENY
"""


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` in one rename, as editors and config tools do: the broker never reads half of it."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def signed(request: RemotingCommand, credentials: SessionCredentials) -> RemotingCommand:
    sign(request, credentials)
    return request


@dataclass
class AclBroker:
    namesrv: ServerProcess
    broker: ServerProcess
    acl_file: Path


def start_acl_broker(servers: ServerFactory, acl_file: Path, *extra: str) -> AclBroker:
    namesrv = servers.namesrv()
    broker = servers.broker(namesrv.address, "--set", "aclEnable=true", "--set", f"plainAclFile={acl_file}", *extra)
    return AclBroker(namesrv, broker, acl_file)


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    return path


@pytest.fixture
def acl_broker(servers: ServerFactory, acl_file: Path) -> AclBroker:
    """A name server and a broker with ACL on, accounts from :data:`ACCOUNTS`."""
    return start_acl_broker(servers, acl_file)
