"""Settings from Java-style `.properties` files (Apache RocketMQ's broker.conf) into dataclasses.

A key is the camelCase name of a field (`brokerName` -> `broker_name`, see
:mod:`rocketspark.protocol.schema`). Values are converted to the field's type. A key that no
settings class declares is an error naming the closest known keys: a typo never silently becomes
a default, unlike Java's `MixAll.properties2Object`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rocketspark.errors import ConfigError
from rocketspark.protocol.schema import parse_text, wire_fields


def read_properties(path: Path) -> dict[str, str]:
    """`key=value` (or `key: value`) lines; `#` and `!` start comments; blank lines are skipped."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        positions = [p for p in (line.find("="), line.find(":")) if p > 0]
        if not positions:
            raise ConfigError(f"{path}:{number}: expected key=value, got {raw!r}")
        split = min(positions)
        values[line[:split].strip()] = line[split + 1 :].strip()
    return values


def known_keys(*classes: type) -> dict[str, type]:
    return {f.wire_name: cls for cls in classes for f in wire_fields(cls)}


def build(classes: tuple[type, ...], values: Mapping[str, str], source: str) -> list[Any]:
    """One instance of each class, built from the `values` each declares (defaults elsewhere)."""
    owners = known_keys(*classes)
    unknown = [key for key in values if key not in owners]
    if unknown:
        details = []
        for key in unknown:
            close = difflib.get_close_matches(key, owners, n=2)
            details.append(f"{key!r}" + (f" (did you mean {' or '.join(close)}?)" if close else ""))
        raise ConfigError(f"unknown setting{'s' if len(details) > 1 else ''} in {source}: {', '.join(details)}")
    instances = []
    for cls in classes:
        kwargs: dict[str, Any] = {}
        for f in wire_fields(cls):
            if f.wire_name in values:
                raw = values[f.wire_name]
                if f.optional and raw.strip() == "":
                    kwargs[f.attr] = None
                    continue
                try:
                    kwargs[f.attr] = parse_text(raw, f.type)
                except ValueError as exc:
                    raise ConfigError(f"setting {f.wire_name}={raw!r} in {source} is invalid: {exc}") from None
        try:
            instances.append(cls(**kwargs))
        except ValueError as exc:
            raise ConfigError(f"invalid settings in {source}: {exc}") from None
    return instances


def require_positive(instance: Any, *names: str) -> None:
    """Settings validation: each named field must be greater than zero (ConfigError, a ValueError)."""
    keys = {f.attr: f.wire_name for f in wire_fields(type(instance))}
    for name in names:
        if getattr(instance, name) <= 0:
            raise ConfigError(f"{keys.get(name, name)} must be positive, got {getattr(instance, name)}")


def describe(instance: Any) -> dict[str, str]:
    """Every setting of a settings object under its key, as text (GET_BROKER_CONFIG, logs)."""
    result = {}
    for f in wire_fields(type(instance)):
        value = getattr(instance, f.attr)
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif value is None:
            text = ""
        else:
            text = getattr(value, "name", None) or str(value)
        result[f.wire_name] = text
    return result


__all__ = ["build", "describe", "known_keys", "read_properties", "require_positive"]
