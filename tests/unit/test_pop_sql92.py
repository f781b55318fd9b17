"""SQL92 filter expressions (broker/pop/sql92.py): Apache RocketMQ's grammar and its three-valued logic."""

from __future__ import annotations

import pytest

from broker.pop.errors import PopError, Refusal
from broker.pop.sql92 import compile_sql92

PROPERTIES = {"a": "5", "b": "abc", "price": "12.5", "region": "eu-west", "flag": "true", "TAGS": "TagA", "neg": "-3"}


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        ("a = 5", True),
        ("a = '5'", True),
        ("a > 4 AND a < 6", True),
        ("a >= 5 and a <= 5", True),  # keywords in any case
        ("a > 5", False),
        ("a <> 5", False),
        ("a <> 6", True),
        ("price > 12", True),
        ("price > 12.75", False),
        ("a BETWEEN 1 AND 5", True),
        ("a NOT BETWEEN 1 AND 5", False),
        ("a BETWEEN 6 AND 9", False),
        ("b = 'abc'", True),
        ("b IN ('x', 'abc')", True),
        ("b NOT IN ('x', 'abc')", False),
        ("region CONTAINS 'west'", True),
        ("region NOT CONTAINS 'west'", False),
        ("TAGS = 'TagA' OR TAGS = 'TagB'", True),
        ("missing IS NULL", True),
        ("a IS NOT NULL", True),
        ("missing = 1", False),  # unknown: no match
        ("NOT (missing = 1)", False),  # NOT unknown is unknown
        ("missing = 1 OR a = 5", True),
        ("missing = 1 AND a = 5", False),
        ("NOT (a = 6)", True),
        ("flag = TRUE", True),
        ("b > 1", False),  # not a number
        ("neg < -2", True),
        ("-a < 0", True),
        ("(a = 5 OR b = 'x') AND NOT (region = 'us')", True),
        ("NOT region = 'us'", False),  # NOT binds to `region` (no boolean: FALSE), as in Apache's grammar
        ("flag", False),  # a property is a string, never TRUE
        ("b = 'it''s'", False),
        ("a = 5 -- a comment", True),
        ("/* first */ a = 5", True),
        ("TRUE", True),
        ("FALSE", False),
    ],
)
def test_expressions_match_as_apaches_do(expression: str, matches: bool) -> None:
    assert compile_sql92(expression)(PROPERTIES) is matches


@pytest.mark.parametrize(
    "expression",
    ["", "a >", "a = NULL", "b > 'x'", "a IN (1, 2)", "(a = 1", "a = 1)", "5", "a = 1 AND", "a ! 1", "x" * 5000],
)
def test_what_is_no_expression_is_refused(expression: str) -> None:
    with pytest.raises(PopError) as caught:
        compile_sql92(expression)
    assert caught.value.refusal is Refusal.ILLEGAL_FILTER_EXPRESSION
    assert "SQL92" in str(caught.value)


def test_deep_nesting_is_refused_not_crashed() -> None:
    with pytest.raises(PopError):
        compile_sql92("(" * 5000 + "a = 1" + ")" * 5000)
