"""Fixtures of the TLS tests: certificates made for the session, servers that enforce TLS."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from rocketspark.processes import ServerProcess, broker_process, wait_registered
from tests.harness import ServerFactory
from tests.tls.certs import Certificates, make_certificates


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@dataclass
class TlsCluster:
    """A name server and a broker that both refuse plain connections, and how clients reach them."""

    namesrv: ServerProcess
    broker: ServerProcess
    certs: Certificates

    @property
    def client_options(self) -> dict[str, Any]:
        return {"use_tls": True, "tls_trust": self.certs.ca}


def start_tls_cluster(servers: ServerFactory, certs: Certificates, **broker_settings: object) -> TlsCluster:
    """Both servers in `enforcing` mode; the broker registers with the name server over TLS too.
    `broker_settings`: more broker.conf keys (`aclEnable="true"`, for one)."""
    tls = ("--tls.server.certPath", str(certs.cert), "--tls.server.keyPath", str(certs.key))
    namesrv = servers.namesrv(*tls, "--tls.server.mode", "enforcing")
    settings = {
        "tls.server.mode": "enforcing",
        "tls.server.certPath": certs.cert,
        "tls.server.keyPath": certs.key,
        "tls.enable": "true",
        "tls.client.trustCertPath": certs.ca,
        **broker_settings,
    }
    sets = [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]
    broker = broker_process(servers.base_dir / "tls-broker", namesrv.address, *sets)
    servers.processes.append(broker)  # stopped with the others whatever happens next
    broker.start()
    cluster = TlsCluster(namesrv, broker, certs)
    wait_registered(namesrv.address, broker.address, **cluster.client_options)
    return cluster


@pytest.fixture
def tls_cluster(servers: ServerFactory, certs: Certificates) -> TlsCluster:
    return start_tls_cluster(servers, certs)
