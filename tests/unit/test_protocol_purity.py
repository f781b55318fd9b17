"""`rocketspark.protocol` is pure wire: no module of it imports the transport, I/O or the layers above.

Every module under rocketspark/protocol is parsed with `ast`, so an import added anywhere (inside a
function, under TYPE_CHECKING, relative or absolute) fails here; a fresh interpreter then imports
the whole package and checks that none of those modules came in through a dependency either.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rocketspark.protocol

PACKAGE = "rocketspark.protocol"
ROOT = Path(rocketspark.protocol.__file__).parent

#: what the protocol must never import: the event loop and sockets, and the layers built on it
FORBIDDEN = (
    "asyncio",
    "socket",
    "ssl",
    "selectors",
    "rocketspark.message",
    "rocketspark.remoting",
    "rocketspark.client",
)


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append((".".join([PACKAGE, *parts]), path))
    return found


def _imported(module: str, path: Path) -> set[str]:
    """Every module name `module`'s source imports, relative imports resolved, `from X import Y`
    counted as both `X` and `X.Y` (Y may be a submodule)."""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            names.add(origin)
            names.update(f"{origin}.{alias.name}" for alias in node.names)
    return names


def _forbidden(name: str) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)


def test_the_walk_sees_the_whole_package() -> None:
    names = {name for name, _ in _modules()}
    assert {PACKAGE, f"{PACKAGE}.codec", f"{PACKAGE}.headers.send", f"{PACKAGE}.body.jsonbody"} <= names


@pytest.mark.parametrize(("module", "path"), _modules(), ids=[name for name, _ in _modules()])
def test_module_imports_nothing_forbidden(module: str, path: Path) -> None:
    bad = sorted(name for name in _imported(module, path) if _forbidden(name))
    assert not bad, f"{module} imports {', '.join(bad)}: the protocol is bytes in, objects out"


def test_the_check_catches_an_import(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text(
        "def f():\n    import asyncio\n    from ...remoting import client\n    from rocketspark.message import ids\n"
    )
    found = _imported(f"{PACKAGE}.headers.module", source)
    assert sorted(name for name in found if _forbidden(name)) == [
        "asyncio",
        "rocketspark.message",
        "rocketspark.message.ids",
        "rocketspark.remoting",
        "rocketspark.remoting.client",
    ]


def test_importing_the_package_loads_nothing_forbidden() -> None:
    """What the modules import (rocketspark.errors, orjson, ...) must not bring them in either."""
    names = [name for name, _ in _modules()]
    script = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert sorted(name for name in loaded if _forbidden(name)) == []
