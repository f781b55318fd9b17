"""Plain-text tables for listings printed by jobs and command-line tools."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns under a header and a rule; numbers are right-aligned."""
    body = [[_cell(value) for value in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells for {len(headers)} columns: {row}")
        widths = [max(w, len(cell)) for w, (cell, _) in zip(widths, row, strict=True)]
    numeric = [all(row[i][1] for row in body) and bool(body) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if right else c.ljust(w) for c, w, right in zip(cells, widths, numeric, strict=True)
        ).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out.extend(line([cell for cell, _ in row]) for row in body)
    return "\n".join(out)


def _cell(value: object) -> tuple[str, bool]:
    if isinstance(value, bool) or value is None:
        return ("-" if value is None else str(value).lower()), False
    if isinstance(value, int):
        return f"{value:,}", True
    if isinstance(value, float):
        return f"{value:,.2f}", True
    return str(value), False
