"""What the benchmarks share: checking the names they are given, printing their rows as a table
and writing them as JSON."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from recsys_seq.core import publish
from recsys_seq.core.errors import UserError
from recsys_seq.core.tables import Column, print_table


def check_names(kind: str, given: Iterable[str], known: Iterable[str]) -> None:
    """Refuse names (of datasets, models, ...) that are not ``known``, naming them all."""
    known = list(known)
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise UserError(f"Unknown {kind}(s) {', '.join(unknown)}; known: {', '.join(known)}.")


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:,.0f}"
    return str(value)


def print_rows(rows: list[dict], title: str | None, header: bool = True) -> None:
    """The rows as a table (:func:`recsys_seq.core.tables.print_table`: markdown unless stdout is a
    terminal, so no cell is ever cut); the columns are the first row's keys."""
    if not rows:
        return
    columns = [Column(key, right=not isinstance(value, str)) for key, value in rows[0].items()]
    print_table(columns, [[_cell(v) for v in row.values()] for row in rows], title, header)


def write_rows(rows: list[dict], output: str | Path, benchmark: str) -> Path:
    """Publish the rows (atomically; only a benchmark file of ours is ever replaced)."""
    path = publish.write_rows(output, rows, benchmark)
    print(f"Rows: {path}")
    return path
