"""Errors that say what to do (issue 41, item 9): each names, in one line, the option or variable that
fixes it: a plain client against a server that enforces TLS, an unsigned request refused by ACL, a
lone ROCKETMQ_SECRET_KEY, and a broker without `tls.enable` against a name server that enforces TLS."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rocketspark import AccessDeniedError, Message, Producer
from rocketspark.client.config import credentials_from_env
from rocketspark.errors import ConfigError, TlsRequiredError
from rocketspark.processes import ServerProcess, broker_process
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.remoting.client import RemotingClient
from tests.cli.conftest import cli_env
from tests.harness import ServerFactory
from tests.security.conftest import AclBroker
from tests.tls.certs import make_certificates


@pytest.fixture
def enforcing_namesrv(servers: ServerFactory, tmp_path: Path) -> ServerProcess:
    certs = make_certificates(tmp_path / "certs")
    tls = ("--tls.server.certPath", str(certs.cert), "--tls.server.keyPath", str(certs.key))
    return servers.namesrv(*tls, "--tls.server.mode", "enforcing")


def rocketspark(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "rocketspark.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)


async def test_a_plain_client_against_an_enforcing_server_is_told_to_use_tls(enforcing_namesrv: ServerProcess) -> None:
    client = RemotingClient()
    try:
        with pytest.raises(TlsRequiredError, match="connect with TLS: use_tls=True in the client, --tls for"):
            await client.invoke(enforcing_namesrv.address, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    finally:
        await client.close()
    listed = rocketspark("topic", "list", env=cli_env(enforcing_namesrv.address))
    assert listed.returncode == 1
    assert "--tls for the rocketspark command" in listed.stderr
    assert len(listed.stderr.strip().splitlines()) == 1


def test_a_broker_without_tls_enable_stops_naming_the_setting(enforcing_namesrv: ServerProcess, tmp_path: Path) -> None:
    broker = broker_process(tmp_path / "broker", enforcing_namesrv.address)
    with pytest.raises(RuntimeError, match="exited with code 1 before booting"):
        broker.start()
    assert "set tls.enable=true in broker.conf" in broker.log_tail()
    assert "boot success" not in broker.log_tail()


def test_an_unsigned_refusal_says_how_to_pass_credentials(acl_broker: AclBroker) -> None:
    with (
        Producer("hints_producer", namesrv_addr=acl_broker.namesrv.address) as producer,
        pytest.raises(AccessDeniedError) as refused,
    ):
        producer.send(Message("HintsTopic", b"unsigned"))
    message = str(refused.value)
    assert "carries no AccessKey" in message
    assert "pass credentials: credentials=SessionCredentials(access_key, secret_key) in the client, " in message
    assert "--access-key or ROCKETMQ_ACCESS_KEY with ROCKETMQ_SECRET_KEY for the rocketspark command" in message


def test_a_lone_secret_key_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCKETMQ_ACCESS_KEY", raising=False)
    monkeypatch.setenv("ROCKETMQ_SECRET_KEY", "a-secret-without-key")
    with pytest.raises(ConfigError, match="ROCKETMQ_SECRET_KEY is set without an access key: set ROCKETMQ_ACCESS_KEY"):
        credentials_from_env()
    env = {k: v for k, v in cli_env("127.0.0.1:1").items() if k != "ROCKETMQ_ACCESS_KEY"}
    listed = rocketspark("topic", "list", env={**env, "ROCKETMQ_SECRET_KEY": "a-secret-without-key"})
    assert listed.returncode == 1
    assert "ROCKETMQ_SECRET_KEY is set without an access key: set ROCKETMQ_ACCESS_KEY" in listed.stderr
    assert "a-secret-without-key" not in listed.stderr
