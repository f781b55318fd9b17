"""The access check of one request, in the order of Apache RocketMQ's PlainPermissionManager.validate.

1. an address of the global white list: accepted;
2. no `AccessKey`: refused; an access key without an account: refused;
3. an address of the account's own white list: accepted, without signature or permission checks;
4. the signature (rocketspark.remoting.signing, compared in constant time): refused when it differs;
   then the request's shape (broker.acl.shapes): a field of another code's header is refused, so a
   signature cannot be re-aimed at another code, and a required field missing is INVALID_PARAMETER;
5. the permissions broker.acl.resources names for the request code: `admin`, then each topic and
   group (an explicit entry, else the account's default; DENY always refuses). An admin account
   without any topic or group entry may use every topic and group, and a PUB on
   RMQ_SYS_TRACE_TOPIC (message traces) needs only the signature, as in Apache.

A refusal is the reason as text (a `Refusal`, which also names its kind for the throttled log),
starting with rocketspark.errors.ACL_REFUSAL_PREFIX (so that clients tell it from the NO_PERMISSION
of a topic whose permission was wiped): it names the access key and the permission and resource
refused, never a secret. A refusal before the permission step (no access key, no account, a wrong
signature) ends with what the request's header says it would need: nothing of an unauthenticated
body is read for it, and every value the peer chose is escaped and clipped.

`refused_needs` checks one account's permissions on its own, for processors that learn the resource
only from what they read (VIEW_MESSAGE_BY_ID's topic is the stored message's).
"""

from __future__ import annotations

import logging

from broker.acl.accounts import Account, AclConfig
from broker.acl.permission import Perm, allows
from broker.acl.resources import READS_BODY, Needs, needs_of
from broker.acl.shapes import refused_shape
from rocketspark.errors import ACL_REFUSAL_PREFIX as REFUSED
from rocketspark.protocol.codes import code_name
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.signing import ACCESS_KEY, verify
from rocketspark.remoting.throttled_log import escaped

log = logging.getLogger(__name__)

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


class Refusal(str):
    """Why a request is refused (the remark), and `kind`: which step refused it, for the log."""

    kind: str

    def __new__(cls, text: str, kind: str) -> Refusal:
        refusal = super().__new__(cls, text)
        refusal.kind = kind
        return refusal


class AccessValidator:
    """Checks requests against the current accounts; the file watcher swaps `config` on a reload."""

    def __init__(self, config: AclConfig) -> None:
        self.config = config

    def check(self, client_ip: str, request: RemotingCommand) -> Refusal | None:
        """Why `request` from `client_ip` is refused, or None when it may go on to its processor."""
        config = self.config  # one snapshot for the whole check
        if any(matches(client_ip) for matches in config.global_white):
            return None
        access_key = request.ext_fields.get(ACCESS_KEY)
        if not access_key:
            reason = f"{code_name(request.code)} carries no AccessKey; this broker needs signed requests"
            return Refusal(f"{REFUSED}{reason}{_needs_text(request)}", "unsigned")
        account = config.accounts.get(access_key)
        if account is None:
            reason = f"access key {escaped(access_key)} has no account on this broker"
            return Refusal(f"{REFUSED}{reason}{_needs_text(request)}", "unknown access key")
        if account.white_address(client_ip):
            return None
        if not verify(request, account.secret_key):
            reason = f"signature does not match for access key {access_key}"
            return Refusal(f"{REFUSED}{reason}{_needs_text(request)}", "bad signature")
        shape = refused_shape(request)
        if shape is not None:
            return Refusal(shape, "re-aimed")
        return _refused_permission(account, request.code, needs_of(request))

    def refused_needs(self, client_ip: str, access_key: str | None, code: int | str, needs: Needs) -> Refusal | None:
        """Why `access_key`'s account (whose signature the check already verified) may not have
        `needs` for a request of `code` (a 4.x request code, or a 5.x RPC's name), or None when it
        may; from a white-listed address, None."""
        config = self.config
        if any(matches(client_ip) for matches in config.global_white):
            return None
        account = config.accounts.get(access_key) if access_key else None
        if account is None:  # only after a reload removed the account since the check
            return Refusal(f"{REFUSED}access key {access_key} has no account on this broker", "unknown access key")
        if account.white_address(client_ip):
            return None
        return _refused_permission(account, code, needs)


def _needs_text(request: RemotingCommand) -> str:
    """ " (needs SUB on topic T, SUB on group G)": what `request`'s header says it would need, for a
    refusal before the permission step; empty when the rule reads the body (an unauthenticated body is
    never parsed) or the header cannot be read (the refusal stands anyway)."""
    if request.code in READS_BODY:
        return ""
    try:
        needs = needs_of(request)
    except Exception:  # a malformed request is refused for its signature all the same
        log.debug("the needs of refused %s are unreadable", code_name(request.code), exc_info=True)
        return ""
    if needs.admin:
        return " (needs an admin account)"
    if not needs.resources:
        return ""
    return (
        " (needs "
        + ", ".join(f"{need.perm.name} on {need.kind} {escaped(need.name)}" for need in needs.resources)
        + ")"
    )


def _perm_name(perm: Perm) -> str:
    """PUB, SUB, or PUB or SUB (either is enough)."""
    return " or ".join(p.name or "" for p in (Perm.PUB, Perm.SUB) if perm & p) or (perm.name or str(perm))


def _refused_permission(account: Account, code: int | str, needs: Needs) -> Refusal | None:
    key = account.access_key
    if needs.admin and not account.admin:
        what = code if isinstance(code, str) else code_name(code)
        return Refusal(f"{REFUSED}{what} needs an admin account, and access key {key} is not one", "permission")
    if account.admin and not account.topic_perms and not account.group_perms:
        return None
    if any(need.kind == "topic" and need.name == TRACE_TOPIC and need.perm == Perm.PUB for need in needs.resources):
        return None
    for need in needs.resources:
        owned = account.topic_perm(need.name) if need.kind == "topic" else account.group_perm(need.name)
        if not allows(owned, need.perm):
            return Refusal(
                f"{REFUSED}{_perm_name(need.perm)} on {need.kind} {escaped(need.name)} for access key {key}",
                "permission",
            )
    return None
