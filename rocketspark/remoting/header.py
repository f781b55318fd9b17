"""Typed command headers: the `extFields` map of a request or response as a dataclass.

A header class declares its fields with Python types (`str`, `int`, `bool`, optionally `| None`);
a field without a default is required (Java's `@CFNotNull`). On the wire every value is a
string, as Java's `makeCustomHeaderToNet` writes it: booleans as `true`/`false`, `None` omitted.
Business logic only ever sees the typed object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from rocketspark.remoting.errors import HeaderFieldError
from rocketspark.remoting.schema import parse_text, wire_fields


def format_value(value: Any) -> str:
    """A header value as Java's `toString()` writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class CommandHeader:
    """Base class of header dataclasses; see the module docstring."""

    def to_ext_fields(self) -> dict[str, str]:
        ext: dict[str, str] = {}
        for f in wire_fields(type(self)):
            value = getattr(self, f.attr)
            if value is not None:
                ext[f.wire_name] = format_value(value)
        return ext

    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, str]) -> Self:
        kwargs: dict[str, Any] = {}
        for f in wire_fields(cls):
            raw = ext.get(f.wire_name)
            if raw is None or (raw == "" and f.type is not str):
                if f.required:
                    raise HeaderFieldError(f"{cls.__name__}: missing required field '{f.wire_name}'")
                continue
            try:
                kwargs[f.attr] = parse_text(raw, f.type)
            except ValueError as exc:
                raise HeaderFieldError(f"{cls.__name__}: field '{f.wire_name}' = {raw!r} is invalid: {exc}") from None
        return cls(**kwargs)
