"""Permissions of the accounts file: `DENY`, `PUB`, `SUB` and `PUB|SUB`, with Apache RocketMQ's bit values."""

from __future__ import annotations

import enum


class Perm(enum.IntFlag):
    DENY = 1
    PUB = 4
    SUB = 8


#: the words of the accounts file and what they grant ("SUB|PUB" is Apache's alias of "PUB|SUB")
PERMISSION_WORDS = {
    "DENY": Perm.DENY,
    "PUB": Perm.PUB,
    "SUB": Perm.SUB,
    "PUB|SUB": Perm.PUB | Perm.SUB,
    "SUB|PUB": Perm.PUB | Perm.SUB,
}


def parse_permission(text: str) -> Perm:
    """The permission a word of the accounts file names; ValueError for any other word."""
    try:
        return PERMISSION_WORDS[text.strip().upper()]
    except KeyError:
        raise ValueError(f"unknown permission {text!r}: expected DENY, PUB, SUB or PUB|SUB") from None


def allows(owned: Perm, needed: Perm) -> bool:
    """Whether `owned` grants `needed`: a DENY refuses everything, whatever else is set."""
    return not owned & Perm.DENY and bool(owned & needed)
