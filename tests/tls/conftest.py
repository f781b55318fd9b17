"""Fixtures of the TLS tests: certificates made for the session, name servers with TLS flags."""

from __future__ import annotations

import pytest

from tests.tls.certs import Certificates, make_certificates


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))
