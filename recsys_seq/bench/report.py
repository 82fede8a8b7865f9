"""Printing benchmark rows as a table and writing them as JSON."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from data_prep import publish


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:,.0f}"
    return str(value)


def print_rows(rows: list[dict], title: str | None, header: bool = True) -> None:
    """A rich table, wide enough for every column even when output is not a terminal."""
    if not rows:
        return
    table = Table(title=title, show_header=header)
    for key in rows[0]:
        table.add_column(key, justify="left" if isinstance(rows[0][key], str) else "right")
    for row in rows:
        table.add_row(*(_cell(v) for v in row.values()))
    Console(width=200).print(table)


def write_rows(rows: list[dict], output: str | Path, benchmark: str) -> Path:
    """Publish the rows (atomically; only a benchmark file of ours is ever replaced)."""
    path = publish.write_rows(output, rows, benchmark)
    print(f"Rows: {path}")
    return path
