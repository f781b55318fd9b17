"""Typed command headers: the `extFields` map of a request or response as a dataclass.

A header class declares its fields with Python types (`str`, `int`, `bool`, optionally `| None`);
a field without a default is required (Java's `@CFNotNull`). On the wire every value is a
string, as Java's `makeCustomHeaderToNet` writes it: booleans as `true`/`false`, `None` omitted.
Business logic only ever sees the typed object.

Headers are encoded and decoded on every request, so each class gets its two converters generated
once, as straight-line code (the way `dataclasses` builds `__init__`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Self

from rocketspark.errors import HeaderFieldError
from rocketspark.protocol.schema import WireField, parse_text, wire_fields


def _encoder(cls: type) -> Callable[[Any], dict[str, str]]:
    lines = ["def to_ext_fields(self):", "    ext = {}"]
    for f in wire_fields(cls):
        if f.type is bool:
            converted = "('true' if v else 'false')"
        elif f.type is str:
            converted = "v"
        else:
            converted = "str(v)"
        lines += [f"    v = self.{f.attr}", "    if v is not None:", f"        ext[{f.wire_name!r}] = {converted}"]
    lines.append("    return ext")
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), namespace)  # generated from the class's own field list
    encode: Callable[[Any], dict[str, str]] = namespace["to_ext_fields"]
    return encode


def _parser(f: WireField) -> Callable[[str], Any]:
    if f.type is str:
        return str
    if f.type is int:
        return int  # int() itself ignores surrounding blanks
    return lambda raw: parse_text(raw, f.type)


_encoders: dict[type, Callable[[Any], dict[str, str]]] = {}
_decoders: dict[type, tuple[tuple[WireField, Callable[[str], Any]], ...]] = {}


class CommandHeader:
    """Base class of header dataclasses; see the module docstring."""

    def to_ext_fields(self) -> dict[str, str]:
        encode = _encoders.get(type(self))
        if encode is None:
            encode = _encoders[type(self)] = _encoder(type(self))
        return encode(self)

    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, str]) -> Self:
        decoders = _decoders.get(cls)
        if decoders is None:
            decoders = _decoders[cls] = tuple((f, _parser(f)) for f in wire_fields(cls))
        kwargs: dict[str, Any] = {}
        for f, parse in decoders:
            raw = ext.get(f.wire_name)
            if raw is None or (raw == "" and f.type is not str):
                if f.required:
                    raise HeaderFieldError(f"{cls.__name__}: missing required field '{f.wire_name}'")
                continue
            try:
                kwargs[f.attr] = parse(raw)
            except ValueError as exc:
                reason = "expected an integer" if f.type is int else exc
                message = f"{cls.__name__}: field '{f.wire_name}' = {raw!r} is invalid: {reason}"
                raise HeaderFieldError(message) from None
        header = cls(**kwargs)
        header.check()
        return header

    def check(self) -> None:
        """Checks of decoded values beyond their types (ranges, relations). A header class that has
        such rules overrides this and raises :class:`HeaderFieldError` naming the field."""

    def field_error(self, attr: str, rule: str) -> HeaderFieldError:
        """The error for a field of this header whose value breaks `rule`, named as on the wire."""
        wire_name = next(f.wire_name for f in wire_fields(type(self)) if f.attr == attr)
        value = getattr(self, attr)
        return HeaderFieldError(f"{type(self).__name__}: field '{wire_name}' = {value!r} is invalid: {rule}")
