"""Test certificates made with the `openssl` command line: a CA and a server certificate it signs.

The server certificate names 127.0.0.1 (an IP subject alternative name) and localhost, and no
other address, so a client dialling 127.0.0.2 fails the host name check.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

SERVER_NAMES = "IP:127.0.0.1,DNS:localhost"
_EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the CA that signed `cert`
    cert: Path  # the server's certificate
    key: Path  # its private key
    other_ca: Path  # a CA that signed nothing here


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)


def _make_ca(directory: Path, name: str) -> None:
    _openssl(
        directory,
        *("req", "-x509", *_EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2"),
        *("-subj", f"/CN=rocketspark test {name}"),
        *("-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    _make_ca(directory, "ca")
    _make_ca(directory, "other-ca")
    _openssl(directory, "req", *_EC_KEY, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=rocketspark")
    (directory / "server.ext").write_text(
        f"subjectAltName={SERVER_NAMES}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid\n"
    )
    _openssl(
        directory,
        *("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"),
        *("-out", "server.pem", "-days", "2", "-extfile", "server.ext"),
    )
    return Certificates(
        directory / "ca.pem", directory / "server.pem", directory / "server.key", directory / "other-ca.pem"
    )
