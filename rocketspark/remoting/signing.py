"""ACL 1.0 request signing, shared by the clients that sign and the broker that checks.

A signed request carries `AccessKey`, an optional `SecurityToken` and `Signature` among its ext
fields. The signature is HMAC-SHA1, keyed with the secret key's UTF-8 bytes and Base64-encoded,
over the *values* of every ext field except `Signature`, taken in sorted key order and encoded as
UTF-8, followed by the body: what Apache RocketMQ's `AclClientRPCHook` signs and its
`PlainAccessValidator` checks. Fields a client adds after signing (Java's `_UNIQUE_KEY_QUERY` on a
query by unique key) are not covered, so the checker leaves them out too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field

from rocketspark.protocol.command import RemotingCommand

ACCESS_KEY = "AccessKey"
SECURITY_TOKEN = "SecurityToken"
SIGNATURE = "Signature"
#: the ext field of QUERY_MESSAGE that asks for a lookup by unique key; Java adds it after signing
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
#: ext fields that the signature never covers: the signature itself, and what Java adds after signing
UNSIGNED_FIELDS = frozenset({SIGNATURE, UNIQUE_KEY_QUERY})


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """An access key and its secret (and an optional security token), as Java's class of that name.

    The secret is kept out of `repr`, so a credentials object in a log line or a traceback shows
    the access key only.
    """

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("SessionCredentials need a non-empty access key and secret key")


def signature(secret_key: str, ext_fields: Mapping[str, str], body: bytes | memoryview | None) -> str:
    """Base64 of HMAC-SHA1, keyed with the secret's UTF-8 bytes, over the field values in sorted key
    order and then the body, fed to the HMAC one after the other: a large body is never copied."""
    values = "".join(
        value for key, value in sorted(ext_fields.items()) if key not in UNSIGNED_FIELDS and value is not None
    )
    mac = hmac.new(secret_key.encode("utf-8"), values.encode("utf-8"), hashlib.sha1)
    if body:
        mac.update(body)
    return base64.b64encode(mac.digest()).decode("ascii")


def sign(request: RemotingCommand, credentials: SessionCredentials) -> None:
    """Add `AccessKey`, `SecurityToken` (when set) and `Signature` to `request`, in place.

    Called once per request on its way out, after every header field is set: anything added
    later is not covered by the signature.
    """
    fields = request.ext_fields
    fields.pop(SIGNATURE, None)
    fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token:
        fields[SECURITY_TOKEN] = credentials.security_token
    else:
        fields.pop(SECURITY_TOKEN, None)
    fields[SIGNATURE] = signature(credentials.secret_key, fields, request.wire_body)


class AclClientRPCHook:
    """The RPC hook that signs every request with `credentials` (Apache's class of that name)."""

    def __init__(self, credentials: SessionCredentials) -> None:
        self.credentials = credentials

    def before_request(self, address: str, request: RemotingCommand) -> None:
        sign(request, self.credentials)

    def __repr__(self) -> str:
        return f"AclClientRPCHook({self.credentials!r})"


def verify(request: RemotingCommand, secret_key: str) -> bool:
    """Whether `request`'s `Signature` is the one `secret_key` gives, compared in constant time."""
    claimed = request.ext_fields.get(SIGNATURE)
    if not claimed:
        return False
    expected = signature(secret_key, request.ext_fields, request.body)
    return hmac.compare_digest(expected.encode("ascii"), claimed.encode("utf-8", "replace"))
