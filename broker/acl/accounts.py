"""The accounts file in Apache RocketMQ's plain_acl.yml format, read with the line of every mistake.

    globalWhiteRemoteAddresses: [10.10.103.*]     # these addresses need no access key
    accounts:
      - accessKey: RocketMQ
        secretKey: "12345678"
        whiteRemoteAddress:                        # an address pattern that skips the signature
        admin: false                               # topic and group create/delete, broker config
        defaultTopicPerm: DENY                     # topics not listed below (missing: DENY)
        defaultGroupPerm: SUB                      # groups not listed below (missing: DENY)
        topicPerms: [topicA=DENY, topicB=PUB|SUB]
        groupPerms: [groupA=DENY, groupB=SUB]

Stricter than Apache, which skips what it cannot read: an unknown key, a key given twice (YAML would
keep the last silently), a topic or group listed twice, an unknown permission word, an address
pattern it cannot read, a short or repeated access key is an error naming its line. A file that its
group or everyone may write is refused (anyone who can write it can give themselves every right),
and the file is read until two reads in a row agree, so a file being written in place is not taken
with its last lines missing.
"""

from __future__ import annotations

import difflib
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import yaml  # type: ignore[import-untyped]

from broker.acl.addresses import AddressMatcher, parse_address_pattern
from broker.acl.permission import Perm, parse_permission
from rocketspark.errors import ConfigError

#: Apache refuses access and secret keys of 6 characters or fewer
MIN_KEY_LENGTH = 7
_TOP_KEYS = ("globalWhiteRemoteAddresses", "accounts", "dataVersion")  # dataVersion: Apache's, ignored
_ACCOUNT_KEYS = (
    "accessKey",
    "secretKey",
    "whiteRemoteAddress",
    "admin",
    "defaultTopicPerm",
    "defaultGroupPerm",
    "topicPerms",
    "groupPerms",
)
#: reads of a file being written until two in a row agree, and the pause between reads
SETTLE_READS = 10
SETTLE_PAUSE_S = 0.05
_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}


class AclFileError(ConfigError):
    """The accounts file cannot be used; the message names the file, the line and the reason."""


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    white_address: AddressMatcher = field(repr=False)
    admin: bool
    default_topic_perm: Perm
    default_group_perm: Perm
    topic_perms: Mapping[str, Perm]
    group_perms: Mapping[str, Perm]

    def topic_perm(self, topic: str) -> Perm:
        return self.topic_perms.get(topic, self.default_topic_perm)

    def group_perm(self, group: str) -> Perm:
        return self.group_perms.get(group, self.default_group_perm)


@dataclass(frozen=True, slots=True)
class AclConfig:
    global_white: tuple[AddressMatcher, ...]
    accounts: Mapping[str, Account]


def load_acl(path: Path, *, reload: bool = False) -> AclConfig:
    """The accounts of the file at `path`; `reload`: see parse_acl."""
    try:
        mode = os.stat(path).st_mode
        data = _settled_read(path)
    except OSError as exc:
        raise AclFileError(f"cannot read the ACL accounts file {path}: {exc.strerror or exc}") from None
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise AclFileError(
            f"{path}: refused: its group or everyone may write it (mode {stat.filemode(mode)}); run chmod go-w {path}"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise AclFileError(
            f"{path}:{line}: not UTF-8: byte 0x{data[exc.start]:02x} at column {column} (offset {exc.start})"
        ) from None
    return parse_acl(text, str(path), reload=reload)


def _settled_read(path: Path) -> bytes:
    """`path`'s bytes once two reads in a row agree (a file written in place is read again)."""
    data = path.read_bytes()
    for _ in range(SETTLE_READS):
        time.sleep(SETTLE_PAUSE_S)
        again = path.read_bytes()
        if again == data:
            return data
        data = again
    raise AclFileError(f"{path}: the file kept changing while it was read; it is read again at its next change")


def parse_acl(text: str, source: str, *, reload: bool = False) -> AclConfig:
    """The accounts of a plain_acl.yml text; AclFileError names `source`, the line and the reason.

    On a `reload`, a text without `accounts` (an empty file, most often one an editor has cut
    before writing it anew) is an error, so the broker keeps its accounts instead of refusing
    every request until the next poll; `accounts: []` removes them all.
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise AclFileError(f"{source}{line}: not valid YAML: {problem}") from None
    reader = _Reader(source)
    if root is None and not reload:
        return AclConfig((), {})
    top = reader.mapping(root, _TOP_KEYS, "the file") if root is not None else {}
    if reload and "accounts" not in top:
        state = "is empty" if root is None else "has no accounts key"
        raise AclFileError(f"{source}: the file {state} (half written?); 'accounts: []' removes every account")
    white = tuple(reader.address(node) for node in reader.sequence(top.get("globalWhiteRemoteAddresses")))
    accounts: dict[str, Account] = {}
    for node in reader.sequence(top.get("accounts")):
        account = reader.account(node)
        if account.access_key in accounts:
            reader.fail(node, f"access key {account.access_key} is listed twice")
        accounts[account.access_key] = account
    return AclConfig(white, accounts)


class _Reader:
    """Turns YAML nodes into values, failing with the node's line."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: yaml.Node, reason: str) -> NoReturn:
        raise AclFileError(f"{self.source}:{node.start_mark.line + 1}: {reason}")

    def mapping(self, node: yaml.Node, keys: tuple[str, ...], what: str) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, f"{what} must be a mapping of keys to values")
        result: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key not in keys:
                close = difflib.get_close_matches(key, keys, n=1)
                hint = f" (did you mean {close[0]}?)" if close else f"; expected one of {', '.join(keys)}"
                self.fail(key_node, f"unknown key {key!r} in {what}{hint}")
            if key in result:
                self.fail(key_node, f"key {key!r} is given twice in {what} (YAML would keep the last one silently)")
            result[key] = value_node
        return result

    def sequence(self, node: yaml.Node | None) -> list[yaml.Node]:
        if node is None or _is_null(node):
            return []
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, "expected a list (lines starting with '- ')")
        return list(node.value)

    def text(self, node: yaml.Node | None) -> str | None:
        """A scalar as written (`12345678` stays the text it is); None when empty or missing."""
        if node is None or _is_null(node):
            return None
        if not isinstance(node, yaml.ScalarNode):
            self.fail(node, "expected a single value")
        return str(node.value)

    def address(self, node: yaml.Node | None) -> AddressMatcher:
        try:
            return parse_address_pattern(self.text(node))
        except ValueError as exc:
            assert node is not None
            self.fail(node, f"bad address pattern: {exc}")

    def permission(self, node: yaml.Node | None, default: Perm) -> Perm:
        word = self.text(node)
        if word is None:
            return default
        try:
            return parse_permission(word)
        except ValueError as exc:
            assert node is not None
            self.fail(node, str(exc))

    def resource_perms(self, node: yaml.Node | None, kind: str) -> dict[str, Perm]:
        perms: dict[str, Perm] = {}
        for item in self.sequence(node):
            entry = self.text(item) or ""
            name, sep, word = entry.partition("=")
            if not sep or not name.strip():
                self.fail(item, f"a {kind} permission is {kind}=PERM, as in {kind}A=SUB; got {entry!r}")
            if name.strip() in perms:
                self.fail(item, f"{kind} {name.strip()} is listed twice")
            perms[name.strip()] = self.permission(_scalar_like(item, word), Perm.DENY)
        return perms

    def key(self, fields: dict[str, yaml.Node], name: str, node: yaml.Node) -> str:
        value = self.text(fields.get(name))
        if value is None or len(value) < MIN_KEY_LENGTH:
            self.fail(fields.get(name, node), f"{name} must be at least {MIN_KEY_LENGTH} characters")
        return value

    def account(self, node: yaml.Node) -> Account:
        fields = self.mapping(node, _ACCOUNT_KEYS, "an account")
        admin = (self.text(fields.get("admin")) or "false").lower()
        if admin not in _TRUE | _FALSE:
            self.fail(fields["admin"], f"admin must be true or false, got {admin!r}")
        return Account(
            access_key=self.key(fields, "accessKey", node),
            secret_key=self.key(fields, "secretKey", node),
            white_address=self.address(fields.get("whiteRemoteAddress")),
            admin=admin in _TRUE,
            default_topic_perm=self.permission(fields.get("defaultTopicPerm"), Perm.DENY),
            default_group_perm=self.permission(fields.get("defaultGroupPerm"), Perm.DENY),
            topic_perms=self.resource_perms(fields.get("topicPerms"), "topic"),
            group_perms=self.resource_perms(fields.get("groupPerms"), "group"),
        )


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _scalar_like(node: yaml.Node, value: str) -> yaml.ScalarNode:
    """A scalar node holding `value`, marked at `node`'s place (for the line of its errors)."""
    return yaml.ScalarNode("tag:yaml.org,2002:str", value, node.start_mark, node.end_mark)
