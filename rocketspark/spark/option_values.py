"""Reading option values: Spark passes every option as a string, under a case-insensitive name.

Shared by the source's and the sink's options, so both name a wrong option and say why alike.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from rocketspark.client.config import parse_namesrv_addr
from rocketspark.errors import ConfigError
from rocketspark.remoting.signing import SessionCredentials
from rocketspark.remoting.tls import client_context, require_tls_for_trust

#: the options that sign requests for brokers with ACL on (lower case); Spark's default
#: spark.redaction.regex covers their names, and they are never logged
CREDENTIAL_OPTIONS = frozenset({"accesskey", "secretkey", "securitytoken"})
#: the options of TLS connections (lower case)
TLS_OPTIONS = frozenset({"usetls", "tlstrust"})


def lowered_options(options: Mapping[str, str], known: Collection[str]) -> dict[str, str]:
    """The options by lower-case name; ConfigError naming any option not in `known` (lower case)."""
    lowered = {k.lower(): v for k, v in options.items()}
    unknown = sorted(k for k in lowered if k not in known)
    if unknown:
        raise ConfigError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for format rocketmq")
    return lowered


def namesrv_option(options: Mapping[str, str]) -> str:
    """The required name-server list (`nameserver`, alias `namesrvAddr`), checked."""
    namesrv = one_of(options, "nameserver", "namesrvAddr")
    if not namesrv or not namesrv.strip():
        raise ConfigError("option nameserver is required: the name servers as host:port[;host:port]")
    parse_namesrv_addr(namesrv)
    return namesrv.strip()


def int_option(options: Mapping[str, str], name: str, *, minimum: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"option {name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"option {name} must be at least {minimum}, got {value}")
    return value


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise ConfigError(f"option {name} must be true or false, got {raw!r}")
    return lowered == "true"


def one_of(options: Mapping[str, str], *names: str) -> str | None:
    given = [n for n in names if n.lower() in options]
    if len(given) > 1:
        raise ConfigError(f"options {' and '.join(given)} mean the same thing; give one")
    return options[given[0].lower()] if given else None


def credentials_option(options: Mapping[str, str]) -> SessionCredentials | None:
    """`accessKey` and `secretKey` (with an optional `securityToken`) as credentials; None without
    them. The error of a half-given pair names the options, never their values."""
    access_key = (options.get("accesskey") or "").strip()
    secret_key = options.get("secretkey") or ""
    token = options.get("securitytoken") or None
    if not access_key and not secret_key:
        if token:
            raise ConfigError("option securityToken needs the options accessKey and secretKey")
        return None
    if not access_key or not secret_key:
        missing = "accessKey" if not access_key else "secretKey"
        raise ConfigError(f"options accessKey and secretKey go together: {missing} is missing or empty")
    return SessionCredentials(access_key, secret_key, token)


def tls_option(options: Mapping[str, str]) -> tuple[bool, str | None]:
    """`useTLS` and `tlsTrust` (a PEM CA file, or `insecure`): whether every connection is TLS and
    what verifies the servers' certificates (None: the system's CAs). An unreadable CA file is an
    error here, before any connection."""
    use_tls = bool_option(options, "useTLS", False)
    trust = (options.get("tlstrust") or "").strip() or None
    require_tls_for_trust(use_tls, trust, trust_name="option tlsTrust", tls_name="useTLS=true")
    if use_tls:
        client_context(trust)
    return use_tls, trust
