"""TLS on the gRPC endpoint with the 4.x port's settings (tls.server.mode, certPath, keyPath): the
official 5.x Python client with `tls_enable` (trusting the tests' CA through gRPC's
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) against `enforcing` (TLS only) and `permissive` (TLS and plain on one
port), and signing with ACL on over TLS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import ServerFactory
from tests.interop.v5.driver import V5Client, V5Error, V5Message
from tests.interop.v5.servers import grpc_broker
from tests.tls.certs import Certificates, make_certificates

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("grpc-tls"))


@pytest.fixture
def trusting(tmp_path: Path, certs: Certificates) -> Iterator[V5Client]:
    """The 5.x client, its TLS trusting the tests' CA."""
    with V5Client(tmp_path / "v5-home", env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(certs.ca)}) as client:
        yield client


def tls_broker(servers: ServerFactory, certs: Certificates, mode: str, *extra: str) -> str:
    namesrv = servers.namesrv()
    _, endpoint = grpc_broker(
        servers,
        namesrv.address,
        *("--set", f"tls.server.mode={mode}"),
        *("--set", f"tls.server.certPath={certs.cert}", "--set", f"tls.server.keyPath={certs.key}"),
        *extra,
    )
    return endpoint


def round_trip(client: V5Client, endpoint: str, topic: str, *, tls: bool, **config: object) -> None:
    """Send one message and receive it back, over TLS or not."""
    producer = client.producer(endpoint, topics=[topic], tls=tls, **config)
    receipt = producer.send(V5Message(topic, f"over {'TLS' if tls else 'plain'}"))
    producer.shutdown()
    consumer = client.simple_consumer(endpoint, f"{topic}_group", {topic: "*"}, tls=tls, **config)
    (message,) = consumer.receive(max_messages=1, invisible_s=10)
    assert message.message_id == receipt.message_id
    consumer.ack(message)
    consumer.shutdown()


def test_enforcing_takes_tls_only(servers: ServerFactory, certs: Certificates, trusting: V5Client) -> None:
    endpoint = tls_broker(servers, certs, "enforcing")
    round_trip(trusting, endpoint, "v5_tls_only", tls=True)
    with pytest.raises(V5Error):
        producer = trusting.producer(endpoint, topics=["v5_tls_plain"], request_timeout_s=2)
        producer.send(V5Message("v5_tls_plain", "plain"))


def test_permissive_takes_tls_and_plain_on_one_port(
    servers: ServerFactory, certs: Certificates, trusting: V5Client
) -> None:
    endpoint = tls_broker(servers, certs, "permissive")
    round_trip(trusting, endpoint, "v5_either_tls", tls=True)
    round_trip(trusting, endpoint, "v5_either_plain", tls=False)


def test_signed_calls_over_tls(servers: ServerFactory, certs: Certificates, trusting: V5Client, tmp_path: Path) -> None:
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text("accounts:\n  - accessKey: v5_tls_user\n    secretKey: tls-user-secret\n    admin: true\n")
    # with ACL on and a certificate, the mode defaults to enforcing, as the 4.x port's
    namesrv = servers.namesrv()
    _, endpoint = grpc_broker(
        servers,
        namesrv.address,
        *("--set", f"tls.server.certPath={certs.cert}", "--set", f"tls.server.keyPath={certs.key}"),
        *("--set", "aclEnable=true", "--set", f"plainAclFile={accounts}"),
    )
    round_trip(trusting, endpoint, "v5_tls_signed", tls=True, access_key="v5_tls_user", secret_key="tls-user-secret")
    with pytest.raises(V5Error):
        round_trip(trusting, endpoint, "v5_tls_signed", tls=True, access_key="v5_tls_user", secret_key="wrong-secret")
