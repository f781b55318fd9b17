"""The CLI against a broker with ACL on: `--access-key` (or ROCKETMQ_ACCESS_KEY) with the secret from
ROCKETMQ_SECRET_KEY signs every command; a missing secret is asked for without echo on a terminal and
is an error naming the variable otherwise; refusals are one line naming the reason, never the secret."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
import typer

from rocketspark.cli.common import client_options, state
from rocketspark.remoting.signing import SessionCredentials
from tests.cli.conftest import cli_env
from tests.security.conftest import ADMIN, USER, AclBroker

pytestmark = pytest.mark.slow


def rocketspark(
    *args: str, env: dict[str, str], stdin: str = "", timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rocketspark.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


def test_every_command_signs_with_the_environment(acl_broker: AclBroker) -> None:
    namesrv = acl_broker.namesrv.address
    base = {k: v for k, v in cli_env(namesrv).items() if not k.startswith("ROCKETMQ_")}
    as_admin = {**base, "ROCKETMQ_SECRET_KEY": ADMIN.secret_key}
    as_user = {**base, "ROCKETMQ_ACCESS_KEY": USER.access_key, "ROCKETMQ_SECRET_KEY": USER.secret_key}

    created = rocketspark("--access-key", ADMIN.access_key, "topic", "create", "CliAcl", "-q", "2", env=as_admin)
    assert created.returncode == 0, created.stderr
    sent = rocketspark("produce", "CliAcl", env=as_user, stdin="one\ntwo\nthree\n")
    assert sent.returncode == 0, sent.stderr
    assert "3 messages" in sent.stdout + sent.stderr
    read = rocketspark("consume", "CliAcl", "--offset", "earliest", "--max", "3", "--timeout", "20", env=as_user)
    assert read.returncode == 0, read.stderr
    assert all(body in read.stdout for body in ("one", "two", "three"))
    described = rocketspark("topic", "describe", "CliAcl", env=as_user)
    assert described.returncode == 0, described.stderr

    refused = rocketspark("topic", "delete", "CliAcl", env=as_user)  # a plain account may not delete
    assert refused.returncode == 1
    assert "needs an admin account" in refused.stderr

    wrong = {**as_user, "ROCKETMQ_SECRET_KEY": "not-the-secret"}
    refused = rocketspark("produce", "CliAcl", env=wrong, stdin="four\n")
    assert refused.returncode == 1
    assert f"signature does not match for access key {USER.access_key}" in refused.stderr
    assert "not-the-secret" not in refused.stdout + refused.stderr

    unsigned = rocketspark("produce", "CliAcl", env=base, stdin="five\n")
    assert unsigned.returncode == 1
    assert "carries no AccessKey" in unsigned.stderr

    no_secret = rocketspark("--access-key", USER.access_key, "topic", "describe", "CliAcl", env=base)
    assert no_secret.returncode == 1
    assert "needs its secret key: set ROCKETMQ_SECRET_KEY" in no_secret.stderr

    # after the command too, as --namesrv; there it wins over ROCKETMQ_ACCESS_KEY
    listed = rocketspark("topic", "list", "--access-key", ADMIN.access_key, env=as_admin)
    assert listed.returncode == 0, listed.stderr
    assert "CliAcl" in listed.stdout
    admin_env = {**as_admin, "ROCKETMQ_ACCESS_KEY": USER.access_key}
    deleted = rocketspark("topic", "delete", "CliAcl", "--access-key", ADMIN.access_key, env=admin_env)
    assert deleted.returncode == 0, deleted.stderr


def test_a_missing_secret_is_asked_for_on_a_terminal(acl_broker: AclBroker, tmp_path: Path) -> None:
    env = {k: v for k, v in cli_env(acl_broker.namesrv.address).items() if not k.startswith("ROCKETMQ_")}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "rocketspark.cli", "--access-key", ADMIN.access_key, "topic", "create", "CliPrompted", "-q", "1"],
        env=env,
        encoding="utf-8",
        timeout=60,
    )
    transcript = tmp_path / "terminal.txt"
    with transcript.open("w") as log:
        child.logfile_read = log
        child.expect(f"secret key of {ADMIN.access_key}")
        child.sendline(ADMIN.secret_key)
        child.expect(pexpect.EOF)
        child.close()
    assert child.exitstatus == 0, transcript.read_text()
    assert ADMIN.secret_key not in transcript.read_text()  # not echoed


def test_a_prompted_secret_keeps_the_security_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """The terminal's prompt replaces only the missing secret: ROCKETMQ_SECURITY_TOKEN still signs."""
    monkeypatch.delenv("ROCKETMQ_SECRET_KEY", raising=False)
    monkeypatch.setenv("ROCKETMQ_SECURITY_TOKEN", "token-from-env")
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(typer, "prompt", lambda *args, **kwargs: ADMIN.secret_key)
    monkeypatch.setattr(state, "access_key", ADMIN.access_key)
    monkeypatch.setattr(state, "use_tls", False)
    credentials = client_options()["credentials"]
    assert credentials == SessionCredentials(ADMIN.access_key, ADMIN.secret_key, "token-from-env")
