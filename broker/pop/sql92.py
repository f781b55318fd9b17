"""SQL92 filter expressions over message properties, as Apache RocketMQ's broker evaluates them.

The grammar of Apache's SelectorParser (from ActiveMQ's JMS selectors, without LIKE and arithmetic):
`OR`, `AND`, `NOT`, parentheses; `=`, `<>`, `>`, `>=`, `<`, `<=`; `BETWEEN a AND b`, `IN ('x', ...)`,
`CONTAINS 'x'` (each with `NOT`), `IS [NOT] NULL`; string literals in single quotes (`''` is a
quote), integers, decimals, TRUE, FALSE, NULL; identifiers name properties (user properties, and
RocketMQ's own: TAGS, KEYS, ...). Keywords are case-insensitive, property names are not.

Values are three-valued as in Apache: a comparison with a property the message lacks is unknown,
NOT of unknown is unknown, and a message matches only when its expression is TRUE. A property (a
string) compared with a number is read as a number (not a number: no match); `<`, `>` of two
strings compares them as numbers, or does not match.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import lru_cache

from broker.pop.errors import PopError, Refusal

Value = str | int | float | bool | None
Node = Callable[[Mapping[str, str]], Value]
#: longest expression parsed (a hostile peer's text is not parsed further)
MAX_LENGTH = 4096

_TOKEN = re.compile(
    r"""\s+|--[^\n\r]*(?:\r\n|\n|\r|$)|/\*.*?\*/
    |(?P<string>'(?:''|[^'])*')
    |(?P<float>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
    |(?P<integer>(?:0|[1-9][0-9]*)[lL]?)
    |(?P<word>[A-Za-z_$][A-Za-z0-9_$]*)
    |(?P<op><>|>=|<=|[=<>(),+-])""",
    re.VERBOSE | re.DOTALL,
)
_KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS"})


class _Literal:
    """A constant of the expression (its checks need to know which operands are constants)."""

    def __init__(self, value: Value) -> None:
        self.value = value

    def __call__(self, properties: Mapping[str, str]) -> Value:
        return self.value


class _Property:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, properties: Mapping[str, str]) -> Value:
        return properties.get(self.name)


class _Boolean:
    """A node known to give a boolean (or unknown)."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def __call__(self, properties: Mapping[str, str]) -> Value:
        return self.node(properties)


def _number(text: str, like: int | float) -> int | float | None:
    """A property's text as a number (an integer where it is one and `like` is), None if none."""
    try:
        return int(text) if isinstance(like, int) else float(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def _order(left: Value, right: Value) -> int | None:
    """-1, 0 or 1 as left is below, equal to or above right; None when they cannot be compared."""
    if isinstance(left, bool) or isinstance(right, bool) or left is None or right is None:
        return None
    a: int | float | None
    b: int | float | None
    if isinstance(left, str) and isinstance(right, str):
        a, b = _number(left, 0.0), _number(right, 0.0)
    elif isinstance(left, str) and not isinstance(right, str):
        a, b = _number(left, right), right
    elif isinstance(right, str) and not isinstance(left, str):
        a, b = left, _number(right, left)
    elif isinstance(left, int | float) and isinstance(right, int | float):
        a, b = left, right
    else:
        return None
    if a is None or b is None:
        return None
    return (a > b) - (a < b)


def _equal(left: Value, right: Value) -> bool | None:
    if left is None or right is None:
        return (left is None and right is None) or (None if left is None else False)
    if isinstance(left, bool) != isinstance(right, bool):  # a property's "true" is TRUE; a number is not
        text, flag = (right, left) if isinstance(left, bool) else (left, right)
        return isinstance(text, str) and (text.lower() == "true") == flag
    if type(left) is type(right):
        return left == right
    return _order(left, right) == 0


def _not(value: Value) -> Value:
    return None if value is None else not value


def _and(a: Value, b: Value) -> Value:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or(a: Value, b: Value) -> Value:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _combined(combine: Callable[[Value, Value], Value], left: Node, right: Node) -> _Boolean:
    return _Boolean(lambda p: combine(left(p), right(p)))


def _negation(node: Node) -> _Boolean:
    return _Boolean(lambda p: _not(node(p)))


def _null_test(node: Node, negated: bool) -> _Boolean:
    return _Boolean(lambda p: (node(p) is None) != negated)


def _text_test(node: Node, test: Callable[[str], bool], negated: bool) -> _Boolean:
    """`test` of a string property (unknown when the message has no such property)."""

    def evaluate(p: Mapping[str, str]) -> Value:
        value = node(p)
        return None if not isinstance(value, str) else test(value) != negated

    return _Boolean(evaluate)


def _containing(part: str) -> Callable[[str], bool]:
    return lambda value: part in value


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        position = 0
        while position < len(text):
            found = _TOKEN.match(text, position)
            if found is None:
                raise self.error(f"unexpected {text[position : position + 10]!r} at character {position}")
            position = found.end()
            kind = found.lastgroup
            if kind is None:
                continue  # space or comment
            token = found.group(kind)
            if kind == "word" and token.upper() in _KEYWORDS:
                kind, token = "keyword", token.upper()
            self.tokens.append((kind, token))
        self.at = 0

    @staticmethod
    def error(detail: str) -> PopError:
        return PopError(Refusal.ILLEGAL_FILTER_EXPRESSION, f"the SQL92 filter expression is invalid: {detail}")

    def peek(self, offset: int = 0) -> tuple[str, str]:
        index = self.at + offset
        return self.tokens[index] if index < len(self.tokens) else ("end", "")

    def take(self, *expected: str) -> str:
        token = self.peek()[1]
        if expected and token not in expected:
            raise self.error(f"expected {' or '.join(expected)}, found {token or 'the end'!r}")
        self.at += 1
        return token

    def accept(self, *tokens: str) -> bool:
        if self.peek()[1] in tokens and self.peek()[0] in ("keyword", "op"):
            self.at += 1
            return True
        return False

    def selector(self) -> Node:
        node = self.boolean(self.disjunction())
        if self.peek()[0] != "end":
            raise self.error(f"unexpected {self.peek()[1]!r}")
        return node

    def boolean(self, node: Node) -> Node:
        if isinstance(node, _Boolean):
            return node
        if isinstance(node, _Property):
            prop = node
            return _Boolean(lambda p: None if (value := prop(p)) is None else value is True)  # no string is one
        if isinstance(node, _Literal) and isinstance(node.value, bool):
            return _Boolean(node)
        raise self.error("an operand of AND, OR or NOT is no condition")

    def disjunction(self) -> Node:
        node = self.conjunction()
        while self.accept("OR"):
            node = _combined(_or, self.boolean(node), self.boolean(self.conjunction()))
        return node

    def conjunction(self) -> Node:
        node = self.equality()
        while self.accept("AND"):
            node = _combined(_and, self.boolean(node), self.boolean(self.equality()))
        return node

    def equality(self) -> Node:
        node = self.comparison()
        while True:
            if self.accept("="):
                node = self.equal(node, self.comparison())
            elif self.accept("<>"):
                node = _negation(self.equal(node, self.comparison()))
            elif self.peek()[1] == "IS":
                self.take("IS")
                negated = self.accept("NOT")
                self.take("NULL")
                node = _null_test(node, negated)
            else:
                return node

    def equal(self, left: Node, right: Node) -> Node:
        for operand in (left, right):
            if isinstance(operand, _Literal) and operand.value is None:
                raise self.error("NULL cannot be compared with =: use IS NULL")
        return _Boolean(lambda p: _equal(left(p), right(p)))

    def comparison(self) -> Node:
        node = self.unary()
        while True:
            op = self.peek()[1]
            negated = op == "NOT" and self.peek(1)[1] in ("BETWEEN", "IN", "CONTAINS")
            if negated:
                self.take("NOT")
                op = self.peek()[1]
            if op in (">", ">=", "<", "<=") and not negated:
                self.take(op)
                node = self.order(node, self.unary(), op)
            elif op == "BETWEEN":
                self.take("BETWEEN")
                low = self.unary()
                self.take("AND")
                high = self.unary()
                if negated:
                    node = _combined(_or, self.order(node, low, "<"), self.order(node, high, ">"))
                else:
                    node = _combined(_and, self.order(node, low, ">="), self.order(node, high, "<="))
            elif op == "IN":
                self.take("IN")
                node = self.within(node, negated)
            elif op == "CONTAINS":
                self.take("CONTAINS")
                node = _text_test(node, _containing(self.string()), negated)
            else:
                return node

    def order(self, left: Node, right: Node, op: str) -> Node:
        for operand in (left, right):
            if isinstance(operand, _Boolean) or (
                isinstance(operand, _Literal) and not isinstance(operand.value, int | float)
            ):
                raise self.error(f"only numbers and properties can be compared with {op}")
        test: Callable[[int], bool] = {
            ">": lambda c: c > 0,
            ">=": lambda c: c >= 0,
            "<": lambda c: c < 0,
            "<=": lambda c: c <= 0,
        }[op]

        def compare(p: Mapping[str, str]) -> Value:
            a, b = left(p), right(p)
            if a is None or b is None:
                return None
            c = _order(a, b)
            return False if c is None else test(c)

        return _Boolean(compare)

    def within(self, operand: Node, negated: bool) -> Node:
        if not isinstance(operand, _Property):
            raise self.error("IN needs a property on its left")
        self.take("(")
        members = {self.string()}
        while self.accept(","):
            members.add(self.string())
        self.take(")")
        return _text_test(operand, members.__contains__, negated)

    def string(self) -> str:
        kind, token = self.peek()
        if kind != "string":
            raise self.error(f"expected a string in quotes, found {token or 'the end'!r}")
        self.at += 1
        return token[1:-1].replace("''", "'")

    def unary(self) -> Node:
        if self.accept("+"):
            return self.unary()
        if self.accept("-"):
            operand = self.unary()
            if isinstance(operand, _Literal):
                if isinstance(operand.value, bool) or not isinstance(operand.value, int | float):
                    raise self.error("only numbers can be negated")
                return _Literal(-operand.value)
            return self.negated(operand)
        if self.accept("NOT"):
            return _negation(self.boolean(self.unary()))
        return self.primary()

    def negated(self, operand: Node) -> Node:
        def negate(p: Mapping[str, str]) -> Value:
            value = operand(p)
            number = _number(value, 0.0) if isinstance(value, str) else None
            return None if number is None else -number

        return negate

    def primary(self) -> Node:
        kind, token = self.peek()
        if self.accept("("):
            node = self.disjunction()
            self.take(")")
            return node
        self.at += 1
        if kind == "string":
            return _Literal(token[1:-1].replace("''", "'"))
        if kind == "integer":
            return _Literal(int(token.rstrip("lL")))
        if kind == "float":
            return _Literal(float(token))
        if kind == "keyword" and token in ("TRUE", "FALSE", "NULL"):
            return _Literal({"TRUE": True, "FALSE": False, "NULL": None}[token])
        if kind == "word":
            return _Property(token)
        raise self.error(f"unexpected {token or 'end of the expression'!r}")


@lru_cache(maxsize=128)
def compile_sql92(text: str) -> Callable[[Mapping[str, str]], bool]:
    """The test of an SQL92 expression: whether message properties match it. ILLEGAL_FILTER_EXPRESSION
    names what is wrong with an expression that is none."""
    if not text.strip():
        raise _Parser.error("it is empty")
    if len(text) > MAX_LENGTH:
        raise _Parser.error(f"it is {len(text)} characters long; at most {MAX_LENGTH} are allowed")
    try:
        node = _Parser(text).selector()
    except RecursionError:
        raise _Parser.error("it nests too deep") from None
    return lambda properties: node(properties) is True
