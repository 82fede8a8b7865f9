"""The one way the project prints a table: rich in a terminal, markdown everywhere else.

A rich table fits itself to the console's width, and a console that is not a terminal (a log
file, a pipe, CI) is 80 columns wide, so cells come out cut (``5,000…``) or wrapped. Output
that is kept must show every cell whole: when the stream is not a terminal the table is written
as markdown, each column padded to its widest cell, so it reads as plain text, pastes into a
document and is never cut. Commands of both packages print through :func:`print_table`
(the foundation imports no torch, so data_prep can use it).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.table import Table


@dataclass(frozen=True)
class Column:
    """A column's heading and alignment (numbers align right)."""

    name: str
    right: bool = False


def print_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    title: str | None = None,
    header: bool = True,
    file: TextIO | None = None,
) -> None:
    """Print ``rows`` (cells already formatted as text) under ``title`` to ``file`` (stdout).

    ``header=False`` hides the headings in a terminal (a key/value table); markdown needs a
    heading row, so there the column names are printed anyway."""
    file = sys.stdout if file is None else file
    console = Console(file=file)
    if not console.is_terminal:
        file.write(markdown(columns, rows, title) + "\n")
        file.flush()
        return
    table = Table(title=title, show_header=header, title_justify="left")
    for column in columns:
        table.add_column(column.name, justify="right" if column.right else "left")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def markdown(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], title: str | None = None
) -> str:
    """A markdown table, each column as wide as its widest cell, after ``title`` (one line per
    title line)."""
    cells = [[c.name for c in columns], *([_escaped(v) for v in row] for row in rows)]
    for row in cells:
        if len(row) != len(columns):
            raise ValueError(f"a row has {len(row)} cells for {len(columns)} columns: {row}")
    widths = [max(3, *(len(row[i]) for row in cells)) for i in range(len(columns))]

    def line(row: Sequence[str]) -> str:
        padded = (
            v.rjust(w) if c.right else v.ljust(w)
            for v, w, c in zip(row, widths, columns, strict=True)
        )
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * (w - 1) + (":" if c.right else "-") for w, c in zip(widths, columns, strict=True)]
    lines = [line(cells[0]), line(rule), *(line(row) for row in cells[1:])]
    if title:
        lines = [*title.splitlines(), "", *lines]
    return "\n".join(lines)


def _escaped(value: str) -> str:
    """A cell on one line that cannot end the cell early."""
    return " ".join(str(value).split()).replace("|", "\\|")
