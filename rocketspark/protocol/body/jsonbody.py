"""Declarative JSON bodies and the one reader for the JSON dialect of Java's fastjson.

A body is a dataclass deriving from :class:`JsonBody`; its fields map to camelCase keys (see
:mod:`rocketspark.protocol.schema`). Java enums travel by name; ordinals are accepted on input,
as C++ clients send them. Nested values may be bodies or any class with `to_dict`/`from_dict`.
Unknown keys are ignored and `None` fields are omitted, as fastjson does. Output is standard
JSON with string map keys, which Java's fastjson also reads.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Callable
from typing import Any, Self

import orjson

from rocketspark.protocol.schema import WireField, strip_optional, wire_fields


def normalise_fastjson(text: str) -> str:
    """Standard JSON from fastjson's output, whose object keys may be bare numbers
    (`{0:"127.0.0.1:10911"}`) or whole objects (`{{"topic":"T",...}:{...}}`, maps keyed by
    MessageQueue). Such keys become JSON strings: `"0"`, and the object's own text."""
    out: list[str] = []
    stack: list[str] = []  # "{" or "["
    expect_key = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            end = _string_end(text, i)
            out.append(text[i:end])
            i = end
            continue
        if expect_key and (c.isdigit() or c == "-"):
            j = i + 1
            while j < n and (text[j].isdigit() or text[j] in ".eE+-"):
                j += 1
            out.append(f'"{text[i:j]}"')
            i, expect_key = j, False
            continue
        if expect_key and c == "{":
            end = _container_end(text, i)
            out.append(orjson.dumps(text[i:end]).decode())
            i, expect_key = end, False
            continue
        if c in "{[":
            stack.append(c)
            expect_key = c == "{"
        elif c in "}]":
            if stack:
                stack.pop()
            expect_key = False
        elif c == ",":
            expect_key = bool(stack) and stack[-1] == "{"
        elif c == ":" or not c.isspace():
            expect_key = False
        out.append(c)
        i += 1
    return "".join(out)


def _string_end(text: str, start: int) -> int:
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i + 1
        i += 1
    return len(text)


def _container_end(text: str, start: int) -> int:
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _string_end(text, i)
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def loads(data: bytes | str) -> Any:
    """Parse JSON as Apache RocketMQ writes it, including fastjson's unquoted numeric keys."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        text = data.decode() if isinstance(data, bytes) else data
        return orjson.loads(normalise_fastjson(text))


Converter = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _decoder(annotation: Any) -> Converter:
    annotation, _ = strip_optional(annotation)
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and hasattr(annotation, "from_dict"):
        return annotation.from_dict  # type: ignore[no-any-return]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum_decoder(annotation)
    if origin in (list, set, frozenset, tuple):
        (item,) = typing.get_args(annotation)[:1]
        item_decoder = _decoder(item)
        container = origin if origin is not tuple else tuple
        return lambda value: container(item_decoder(v) for v in value)
    if origin is dict:
        key_type, value_type = typing.get_args(annotation)
        key_decoder: Converter = int if key_type is int else str
        value_decoder = _decoder(value_type)
        return lambda value: {key_decoder(k): value_decoder(v) for k, v in value.items()}
    if annotation is int:
        return int
    return _identity


def _enum_decoder(enum_type: type[enum.Enum]) -> Converter:
    members = list(enum_type)

    def decode(value: Any) -> Any:
        if isinstance(value, enum_type):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return members[value]  # Java ordinal
        return enum_type[value]

    return decode


def _encode(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, enum.IntEnum | enum.IntFlag):
        return int(value)
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, list | tuple | set | frozenset):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


_decoders: dict[type, tuple[tuple[WireField, Converter], ...]] = {}


def _field_decoders(cls: type) -> tuple[tuple[WireField, Converter], ...]:
    cached = _decoders.get(cls)
    if cached is None:
        hints = typing.get_type_hints(cls)
        cached = tuple((f, _decoder(hints[f.attr])) for f in wire_fields(cls))
        _decoders[cls] = cached
    return cached


class JsonBody:
    """Base class of JSON body dataclasses; see the module docstring."""

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for f in wire_fields(type(self)):
            value = getattr(self, f.attr)
            if value is not None:
                result[f.wire_name] = _encode(value)
        return result

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__} expects a JSON object, got {type(data).__name__}")
        kwargs: dict[str, Any] = {}
        for f, decode in _field_decoders(cls):
            value = data.get(f.wire_name)
            if value is not None:
                kwargs[f.attr] = decode(value)
            elif f.required:
                raise ValueError(f"{cls.__name__}: missing required key '{f.wire_name}'")
            elif f.optional:
                kwargs[f.attr] = None
        return cls(**kwargs)

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        return cls.from_dict(loads(data))
