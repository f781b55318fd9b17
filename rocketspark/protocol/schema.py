"""Field introspection shared by typed headers and JSON bodies.

Both are plain dataclasses. A field's wire name is its camelCase form (`broker_addr` ->
`brokerAddr`) unless `field(metadata=wire("a"))` names it explicitly, as Java's short V2 send
headers and names such as `clientID` need. The result is computed once per class and cached.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

_WIRE_KEY = "rocketspark.wire"


def wire(name: str) -> dict[str, str]:
    """Field metadata giving the name a field has on the wire."""
    return {_WIRE_KEY: name}


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclass(frozen=True, slots=True)
class WireField:
    attr: str
    wire_name: str
    type: Any  # the annotation with `| None` removed
    optional: bool  # annotation admits None
    required: bool  # no default: must be present on the wire


_cache: dict[type, tuple[WireField, ...]] = {}


def strip_optional(annotation: Any) -> tuple[Any, bool]:
    """`X | None` -> (X, True); anything else -> (annotation, False)."""
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != len(typing.get_args(annotation)):
            inner = args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007
            return inner, True
    return annotation, False


def wire_fields(cls: type) -> tuple[WireField, ...]:
    cached = _cache.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls)
    result = []
    for f in dataclasses.fields(cls):
        inner, optional = strip_optional(hints[f.name])
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        result.append(WireField(f.name, f.metadata.get(_WIRE_KEY, camel_case(f.name)), inner, optional, required))
    fields = tuple(result)
    _cache[cls] = fields
    return fields


def parse_text(value: str, target: Any) -> Any:
    """A string as written in extFields or a properties file, converted to a field's type.

    Booleans are `true`/`false` in any case (as Java writes them) or `1`/`0` (as C++ clients
    write them); enums are given by name. Raises ValueError with the reason.
    """
    if target is str:
        return value
    if target is bool:
        lowered = value.strip().lower()
        if lowered in ("true", "1"):  # C++ clients write booleans as 1/0
            return True
        if lowered in ("false", "0"):
            return False
        raise ValueError(f"expected true or false, got {value!r}")
    if target is int:
        return int(value.strip())
    if target is float:
        return float(value.strip())
    if target is Path:
        return Path(value.strip()).expanduser()
    if isinstance(target, type) and issubclass(target, enum.Enum):
        name = value.strip()
        try:
            return target[name]
        except KeyError:
            choices = ", ".join(target.__members__)
            raise ValueError(f"expected one of {choices}, got {value!r}") from None
    raise TypeError(f"unsupported field type {target!r}")
