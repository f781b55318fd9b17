"""The accounts file: read at start (a malformed one stops the broker with the line and reason), and
picked up again within a second or two when it changes (a broken change keeps the last good accounts)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from broker.acl.accounts import AclFileError, load_acl, parse_acl
from broker.acl.addresses import parse_address_pattern
from broker.acl.permission import Perm
from rocketspark.protocol.codes import ResponseCode
from rocketspark.remoting.signing import SessionCredentials
from tests.harness import ServerFactory
from tests.integration.raw_frames import RawConnection
from tests.security.conftest import ACCOUNTS, USER, AclBroker, signed, write_atomically
from tests.security.test_acl_raw_frames import TOPIC, send_request
from tests.waiting import eventually

NEWCOMER = SessionCredentials("newcomer_key", "newcomer-secret-1")
NEWCOMER_ACCOUNT = f"""
  - accessKey: {NEWCOMER.access_key}
    secretKey: {NEWCOMER.secret_key}
    defaultTopicPerm: PUB
"""


async def send_code(connection: RawConnection, credentials: SessionCredentials) -> int:
    return (await connection.invoke(signed(send_request(TOPIC, b"x"), credentials))).code


async def accepted(connection: RawConnection, credentials: SessionCredentials) -> bool:
    return await send_code(connection, credentials) == ResponseCode.SUCCESS


async def test_an_added_account_is_accepted_and_a_broken_edit_keeps_the_old_ones(acl_broker: AclBroker) -> None:
    async with RawConnection(acl_broker.broker.address) as connection:
        assert await send_code(connection, NEWCOMER) == ResponseCode.NO_PERMISSION
        write_atomically(acl_broker.acl_file, ACCOUNTS + NEWCOMER_ACCOUNT)
        await eventually(
            lambda: accepted(connection, NEWCOMER),
            timeout_s=5,
            interval_s=0.1,
            what="the added account accepted",
        )

        broken = ACCOUNTS + NEWCOMER_ACCOUNT + "    topicPerms: [OtherTopic=PUBLISH]\n"
        write_atomically(acl_broker.acl_file, broken)
        line = len(broken.splitlines())
        expected = f"{acl_broker.acl_file}:{line}: unknown permission 'PUBLISH'"
        await eventually(lambda: expected in acl_broker.broker.log_tail(), timeout_s=5, what="the reload error logged")
        assert "ERROR" in next(text for text in acl_broker.broker.log_tail().splitlines() if expected in text)
        # the last good accounts stay, the newcomer's included
        assert await send_code(connection, NEWCOMER) == ResponseCode.SUCCESS
        assert await send_code(connection, USER) == ResponseCode.SUCCESS


async def test_an_emptied_file_keeps_the_accounts(acl_broker: AclBroker) -> None:
    """An editor that cuts the file before writing it anew must not refuse everyone for a poll."""
    async with RawConnection(acl_broker.broker.address) as connection:
        for text, state in (("", "is empty"), ("globalWhiteRemoteAddresses:\n", "has no accounts key")):
            acl_broker.acl_file.write_text(text)
            expected = f"{acl_broker.acl_file}: the file {state}"
            await eventually(
                lambda expected=expected: expected in acl_broker.broker.log_tail(), timeout_s=5, what="reload refused"
            )  # the reload has happened: the accounts it kept are the ones checked next
            assert await send_code(connection, USER) == ResponseCode.SUCCESS
        write_atomically(acl_broker.acl_file, "accounts: []\n")  # said explicitly: no accounts at all
        await eventually(lambda: refused(connection, USER), timeout_s=5, interval_s=0.1, what="every account removed")


async def refused(connection: RawConnection, credentials: SessionCredentials) -> bool:
    return await send_code(connection, credentials) == ResponseCode.NO_PERMISSION


def test_a_file_that_is_not_utf8_names_line_and_column(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_bytes(b"accounts:\n  - accessKey: caf\xe9-key\n")
    with pytest.raises(AclFileError, match=rf"^{re.escape(str(acl_file))}:2: not UTF-8: byte 0xe9 at column 19"):
        load_acl(acl_file)


def test_a_malformed_file_at_start_is_refused_with_line_and_reason(servers: ServerFactory, tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACCOUNTS.replace("whiteRemoteAddress: 127.0.0.1", "whiteRemoteAddress: 127.0.0.300"))
    line = 1 + ACCOUNTS.splitlines().index("    whiteRemoteAddress: 127.0.0.1")
    namesrv = servers.namesrv()
    with pytest.raises(RuntimeError, match="exited with code 1 before booting") as failure:
        servers.broker(namesrv.address, "--set", "aclEnable=true", "--set", f"plainAclFile={acl_file}")
    assert f"{acl_file}:{line}: bad address pattern: '127.0.0.300' is not an IP address" in str(failure.value)


def test_acl_enable_without_a_file_names_the_settings(servers: ServerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    namesrv = servers.namesrv()
    with pytest.raises(RuntimeError) as failure:
        servers.broker(namesrv.address, "--set", "aclEnable=true")
    assert "aclEnable=true needs the accounts file: set plainAclFile in broker.conf, or ROCKETMQ_HOME" in str(
        failure.value
    )


def test_rocketmq_home_conf_is_the_default_place(
    servers: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "plain_acl.yml").write_text("accounts:\n  - accessKey: short\n    secretKey: x\n")
    monkeypatch.setenv("ROCKETMQ_HOME", str(tmp_path))
    namesrv = servers.namesrv()
    with pytest.raises(RuntimeError) as failure:
        servers.broker(namesrv.address, "--set", "aclEnable=true")
    assert f"{tmp_path / 'conf' / 'plain_acl.yml'}:2: accessKey must be at least 7 characters" in str(failure.value)


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("accounts:\n  - accessKey: abcdefgh\n    secretKey: a: b\n", 3, "not valid YAML: mapping values"),
        (
            "accounts:\n  - accessKey: abcdefgh\n    secretKey: 12345678\n    topicPerm: [a=SUB]\n",
            4,
            "did you mean topicPerms?",
        ),
        ("accounts:\n  - accessKey: abcdefgh\n    secretKey: 12345678\n    groupPerms:\n      - g1\n", 5, "group=PERM"),
        ("accounts:\n  - accessKey: abcdefgh\n    secretKey: 12345678\n    admin: maybe\n", 4, "true or false"),
        (
            "accounts:\n  - {accessKey: abcdefgh, secretKey: 12345678}\n"
            "  - {accessKey: abcdefgh, secretKey: 12345678}\n",
            3,
            "listed twice",
        ),
        ("globalWhiteRemoteAddresses:\n  - 10.*.1.1\n", 2, "only '*' may follow"),
    ],
)
def test_malformed_files_name_line_and_reason(text: str, line: int, reason: str) -> None:
    with pytest.raises(AclFileError, match=rf"^acl\.yml:{line}: .*{re.escape(reason)}"):
        parse_acl(text, "acl.yml")


def test_apache_sample_file_reads_as_apache_does() -> None:
    config = parse_acl(APACHE_SAMPLE, "plain_acl.yml")
    account = config.accounts["RocketMQ"]
    assert account.secret_key == "12345678"  # a number in YAML, a text secret all the same
    assert [account.topic_perm(t) for t in ("topicA", "topicB", "topicC", "other")] == [
        Perm.DENY,
        Perm.PUB | Perm.SUB,
        Perm.SUB,
        Perm.DENY,  # defaultTopicPerm
    ]
    assert [account.group_perm(g) for g in ("groupA", "groupC", "other")] == [Perm.DENY, Perm.SUB, Perm.SUB]
    assert config.accounts["rocketmq2"].admin
    assert config.global_white[0]("10.10.103.7") and not config.global_white[0]("10.10.104.7")


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("192.168.1.*", ["192.168.1.0", "192.168.1.255"], ["192.168.2.1", "10.192.168.1"]),
        ("192.168.*.*", ["192.168.7.9"], ["192.169.0.1"]),
        ("192.168.1.1-100", ["192.168.1.1", "192.168.1.100"], ["192.168.1.101", "192.168.1.0"]),
        ("192.168.10-20.*", ["192.168.15.3"], ["192.168.21.3"]),
        ("192.168.1.{1,2}", ["192.168.1.1", "192.168.1.2"], ["192.168.1.3"]),
        ("192.168.1.1,192.168.1.9", ["192.168.1.9"], ["192.168.1.2"]),
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
        ("::1", ["::1"], ["::2"]),
        ("", [], ["127.0.0.1"]),
    ],
)
def test_white_list_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    matches = parse_address_pattern(pattern)
    assert all(matches(ip) for ip in inside)
    assert not any(matches(ip) for ip in outside)


APACHE_SAMPLE = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""


def test_the_accounts_file_of_the_docs_reads_as_described() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    example = re.search(r"```yaml\n(.*?)```", docs, re.S)
    assert example is not None
    config = parse_acl(example.group(1), "docs/security.md")
    account = config.accounts["spark-jobs"]
    assert config.global_white[0]("10.10.103.9")
    assert (account.topic_perm("Orders"), account.topic_perm("Payroll"), account.topic_perm("Other")) == (
        Perm.PUB | Perm.SUB,
        Perm.DENY,
        Perm.DENY,
    )
    assert account.group_perm("orders_reader") == Perm.SUB and not account.admin
