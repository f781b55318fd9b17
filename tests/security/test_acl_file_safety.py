"""The accounts file cannot be taken half-written, with a key given twice, or writable by others
(issue 41, item 6): each is refused with an ERROR and the previous accounts stay in force."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from broker.acl import accounts
from broker.acl.accounts import AclFileError, load_acl, parse_acl
from broker.acl.permission import Perm
from broker.acl.watcher import AclFileWatcher
from tests.security.conftest import ACCOUNTS, DENIED_TOPIC, USER, write_atomically


def test_a_key_given_twice_is_refused_with_its_line() -> None:
    twice = ACCOUNTS.replace(
        "    defaultTopicPerm: PUB|SUB\n", "    defaultTopicPerm: PUB|SUB\n    defaultTopicPerm: DENY\n"
    )
    line = twice.splitlines().index("    defaultTopicPerm: DENY") + 1
    with pytest.raises(AclFileError, match=f"accounts:{line}: key 'defaultTopicPerm' is given twice in an account"):
        parse_acl(twice, "accounts")
    listed_twice = ACCOUNTS.replace(
        f"      - {DENIED_TOPIC}=DENY\n", f"      - {DENIED_TOPIC}=DENY\n      - {DENIED_TOPIC}=PUB\n"
    )
    with pytest.raises(AclFileError, match=f"topic {DENIED_TOPIC} is listed twice"):
        parse_acl(listed_twice, "accounts")


def test_a_file_others_may_write_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    for mode in (0o664, 0o646):
        os.chmod(path, mode)
        with pytest.raises(AclFileError, match=f"its group or everyone may write it .*chmod go-w {path}"):
            load_acl(path)
    os.chmod(path, 0o640)
    assert USER.access_key in load_acl(path).accounts


def test_a_file_being_written_is_read_until_two_reads_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    cut = ACCOUNTS[: ACCOUNTS.index(f"      - {DENIED_TOPIC}=DENY")]  # the DENY not written yet
    reads = iter([cut.encode(), ACCOUNTS.encode()])
    real_read = Path.read_bytes
    monkeypatch.setattr(accounts, "SETTLE_PAUSE_S", 0.0)
    monkeypatch.setattr(Path, "read_bytes", lambda self: next(reads, None) or real_read(self))
    assert load_acl(path).accounts[USER.access_key].topic_perm(DENIED_TOPIC) is Perm.DENY


async def test_a_refused_change_keeps_the_accounts_with_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    watcher = AclFileWatcher(path)
    before = watcher.validator.config
    without_deny = ACCOUNTS.replace(f"      - {DENIED_TOPIC}=DENY\n", "")
    with caplog.at_level(logging.ERROR, "broker.acl.watcher"):
        write_atomically(path, without_deny)
        os.chmod(path, 0o666)
        await watcher.poll()
        assert watcher.validator.config is before
        write_atomically(path, without_deny.replace("    admin: false\n", "    admin: false\n    admin: true\n"))
        await watcher.poll()
        assert watcher.validator.config is before
    assert [r.levelname for r in caplog.records] == ["ERROR", "ERROR"]
    assert "may write it" in caplog.records[0].message and "given twice" in caplog.records[1].message
