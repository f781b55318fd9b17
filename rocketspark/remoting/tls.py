"""TLS for remoting connections: the server's mode and context, the client's trust.

A server takes TLS and plain connections on one port, as Apache RocketMQ's remoting does: the
first byte a client sends tells them apart (0x16 opens a TLS handshake record; a plain frame opens
with its 4-byte big-endian length, whose first byte is below 0x16 while frames stay under
:data:`PERMISSIVE_MAX_FRAME_LENGTH`). `tls.server.mode` says which kinds it accepts.

A client verifies the server's certificate by default, against the system's CAs or a CA file
given as its trust; trusting any certificate must be asked for explicitly (:attr:`TlsTrust.ANY`).
The host name checked is the address the client dials: brokers publish IP addresses, so their
certificates carry those addresses as IP subject alternative names.
"""

from __future__ import annotations

import enum
import ssl
from dataclasses import dataclass
from pathlib import Path

from rocketspark.errors import ConfigError

#: first byte of a TLS record carrying a handshake message (a ClientHello opens with it)
TLS_HANDSHAKE_RECORD = 0x16
#: in permissive mode a plain frame must be shorter than this, or its first byte could be 0x16
PERMISSIVE_MAX_FRAME_LENGTH = TLS_HANDSHAKE_RECORD << 24


class TlsMode(enum.Enum):
    """Which connections a server accepts (Apache's `tls.server.mode` values)."""

    DISABLED = "disabled"  # plain only: a TLS handshake is refused
    PERMISSIVE = "permissive"  # TLS and plain on the same port
    ENFORCING = "enforcing"  # TLS only: a plain connection is refused

    @classmethod
    def parse(cls, text: str) -> TlsMode:
        try:
            return cls(text.strip().lower())
        except ValueError:
            choices = ", ".join(mode.value for mode in cls)
            raise ConfigError(f"tls.server.mode must be one of {choices}, got {text!r}") from None


@dataclass(frozen=True, slots=True)
class ServerTls:
    """A server's TLS: its mode and, unless disabled, the context that serves handshakes."""

    mode: TlsMode = TlsMode.DISABLED
    context: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        if (self.mode is TlsMode.DISABLED) != (self.context is None):
            raise ConfigError(f"tls.server.mode={self.mode.value} needs a server context exactly when TLS is on")

    def check_frame_length(self, max_frame_length: int) -> None:
        """Permissive mode tells plain from TLS by the first byte: frames must stay below 0x16 << 24."""
        if self.mode is TlsMode.PERMISSIVE and max_frame_length >= PERMISSIVE_MAX_FRAME_LENGTH:
            raise ConfigError(
                f"tls.server.mode=permissive needs a frame max length below {PERMISSIVE_MAX_FRAME_LENGTH} bytes "
                f"(a longer plain frame could open with the TLS handshake byte 0x16), got {max_frame_length}"
            )

    def handshake_byte_is_tls(self, max_frame_length: int) -> bool:
        """Whether a connection opening with 0x16 is a TLS handshake. With TLS on, always: permissive
        keeps plain frames below 0x16 << 24 (check_frame_length) and enforcing serves TLS only. With
        TLS disabled, only while frames stay below that length: past it a plain frame may open with
        0x16, and is served as the plain frame it is instead of being refused as a handshake."""
        return self.mode is not TlsMode.DISABLED or max_frame_length < PERMISSIVE_MAX_FRAME_LENGTH


def server_tls(
    mode: TlsMode | str | None,
    cert_path: Path | None,
    key_path: Path | None,
    *,
    mode_with_cert: TlsMode = TlsMode.PERMISSIVE,
) -> ServerTls:
    """The server TLS for `tls.server.mode`, `tls.server.certPath` and `tls.server.keyPath`.

    No mode means `disabled` without a certificate and `mode_with_cert` with one (the broker asks
    `enforcing` when ACL is on: a signature sent in plain text can be replayed). A mode other than
    `disabled` needs both paths; the files are read here, so a bad one stops the server at boot.
    """
    if isinstance(mode, str):
        mode = TlsMode.parse(mode)
    if mode is None:
        mode = TlsMode.DISABLED if cert_path is None else mode_with_cert
    if mode is TlsMode.DISABLED:
        return ServerTls()
    if cert_path is None or key_path is None:
        raise ConfigError(
            f"tls.server.mode={mode.value} needs tls.server.certPath and tls.server.keyPath "
            "(a PEM certificate chain and its unencrypted PEM private key)"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_path, key_path)
    except FileNotFoundError as exc:
        raise ConfigError(f"cannot read TLS certificate or key: {exc.filename}: {exc.strerror}") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"tls.server.certPath={cert_path} and tls.server.keyPath={key_path} are not a PEM certificate "
            f"and its unencrypted private key: {exc}"
        ) from None
    return ServerTls(mode, context)


class TlsTrust(enum.Enum):
    """Which server certificates a client accepts, besides a CA file it names."""

    SYSTEM = "system"  # the certificates the system's CA store verifies (the default)
    ANY = "insecure"  # every certificate, unverified: for tests only ("any" is taken too)


#: the words of `tls_trust` that name a TlsTrust rather than a CA file (Spark's tlsTrust=any, --tls-trust any)
TRUST_WORDS = {"system": TlsTrust.SYSTEM, "insecure": TlsTrust.ANY, "any": TlsTrust.ANY}

#: what `tls_trust` takes: a TlsTrust, one of TRUST_WORDS, or the path of a PEM CA file
TrustSetting = TlsTrust | str | Path | None


def require_tls_for_trust(
    use_tls: bool, trust: TrustSetting, *, trust_name: str = "tls_trust", tls_name: str = "use_tls=True"
) -> None:
    """The one rule for every interface: a trust setting means nothing without TLS, so it is an
    error rather than a plain connection that looks verified. The names are the caller's own
    spellings of the two settings (the client's keywords, the Spark options, the CLI's flags)."""
    if trust is not None and not use_tls:
        raise ConfigError(f"{trust_name} needs {tls_name}: set both, or neither for a plain connection")


def client_context(trust: TrustSetting = None) -> ssl.SSLContext:
    """The context of a TLS client; `trust` None is :attr:`TlsTrust.SYSTEM`."""
    if isinstance(trust, str) and trust.strip().lower() in TRUST_WORDS:
        trust = TRUST_WORDS[trust.strip().lower()]
    if trust is TlsTrust.ANY:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif trust is None or trust is TlsTrust.SYSTEM:
        context = ssl.create_default_context()
    else:
        path = Path(trust).expanduser()
        try:
            context = ssl.create_default_context(cafile=str(path))
        except FileNotFoundError:
            raise ConfigError(f"the TLS trust file {path} (a PEM CA certificate file) does not exist") from None
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"the TLS trust file {path} is not a PEM CA certificate file: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


__all__ = [
    "PERMISSIVE_MAX_FRAME_LENGTH",
    "TLS_HANDSHAKE_RECORD",
    "ServerTls",
    "TlsMode",
    "TlsTrust",
    "TrustSetting",
    "client_context",
    "server_tls",
]
