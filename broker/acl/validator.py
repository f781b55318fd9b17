"""The access check of one request, in the order of Apache RocketMQ's PlainPermissionManager.validate.

1. an address of the global white list: accepted;
2. no `AccessKey`: refused; an access key without an account: refused;
3. an address of the account's own white list: accepted, without signature or permission checks;
4. the signature (rocketspark.remoting.signing, compared in constant time): refused when it differs;
5. the permissions broker.acl.resources names for the request code: `admin`, then each topic and
   group (an explicit entry, else the account's default; DENY always refuses). An admin account
   without any topic or group entry may use every topic and group, and a PUB on
   RMQ_SYS_TRACE_TOPIC (message traces) needs only the signature, as in Apache.

A refusal is the reason as text: it names the access key and the resource, never a secret.
"""

from __future__ import annotations

from broker.acl.accounts import Account, AclConfig
from broker.acl.permission import Perm, allows
from broker.acl.resources import Needs, needs_of
from rocketspark.remoting.codes import code_name
from rocketspark.remoting.command import RemotingCommand
from rocketspark.remoting.signing import ACCESS_KEY, verify

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


class AccessValidator:
    """Checks requests against the current accounts; the file watcher swaps `config` on a reload."""

    def __init__(self, config: AclConfig) -> None:
        self.config = config

    def check(self, client_ip: str, request: RemotingCommand) -> str | None:
        """Why `request` from `client_ip` is refused, or None when it may go on to its processor."""
        config = self.config  # one snapshot for the whole check
        if any(matches(client_ip) for matches in config.global_white):
            return None
        access_key = request.ext_fields.get(ACCESS_KEY)
        if not access_key:
            return f"No permission: {code_name(request.code)} carries no AccessKey; this broker needs signed requests"
        account = config.accounts.get(access_key)
        if account is None:
            return f"No permission: access key {access_key} has no account on this broker"
        if account.white_address(client_ip):
            return None
        if not verify(request, account.secret_key):
            return f"No permission: signature does not match for access key {access_key}"
        return _refused_permission(account, request.code, needs_of(request))


def _refused_permission(account: Account, code: int, needs: Needs) -> str | None:
    key = account.access_key
    if needs.admin and not account.admin:
        return f"No permission: {code_name(code)} needs an admin account, and access key {key} is not one"
    if account.admin and not account.topic_perms and not account.group_perms:
        return None
    if any(need.kind == "topic" and need.name == TRACE_TOPIC and need.perm == Perm.PUB for need in needs.resources):
        return None
    for need in needs.resources:
        owned = account.topic_perm(need.name) if need.kind == "topic" else account.group_perm(need.name)
        if not allows(owned, need.perm):
            return f"No permission: {need.perm.name} on {need.kind} {need.name} for access key {key}"
    return None
