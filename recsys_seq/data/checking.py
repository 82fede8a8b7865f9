"""How the files of a prepared dataset folder are checked, and the one error a check raises.

:mod:`recsys_seq.data.validate` says what each file of the contract must hold; this module is
the means it says it with: a parquet table read column by column with each column's kind
checked from the footer first (integers cast to Int64), and :class:`Rule` s over every row or
every list element of a table, all of a table's checked in one Polars pass as whole-column
aggregates, the first offending row looked up only when one fails, for the message. Every
refusal is a :class:`PreparedDataError` naming the file, what is wrong and what to do.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import polars as pl

from recsys_seq.core.errors import UserError


class PreparedDataError(UserError):
    """A prepared dataset folder that is missing, damaged or not written by recsys-prep."""


MAKE_ONE = "recsys-prep format=<format> input=<raw log> output={folder}"
UNREADABLE = (OSError, pl.exceptions.PolarsError, pl.exceptions.PanicException)

# column kinds: integer types are those whose every value fits int64 (loading casts to it)
INTEGER, INTEGER_LIST = "Int64 (or a narrower integer type)", "lists of Int64"
PLAIN = "plain values (numbers or strings)"
_INTEGERS = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32)
KINDS: dict[str, Callable[[pl.DataType], bool]] = {
    INTEGER: lambda dtype: dtype in _INTEGERS,
    INTEGER_LIST: lambda dtype: isinstance(dtype, pl.List) and dtype.inner in _INTEGERS,
    # original ids keep the raw log's type; they only need a string form (the fingerprint)
    PLAIN: lambda dtype: (
        not dtype.is_nested() and not isinstance(dtype, pl.Null | pl.Object | pl.Binary)
    ),
}
CAST = {INTEGER: pl.Int64, INTEGER_LIST: pl.List(pl.Int64)}


def refuse(file: Path, problem: str) -> NoReturn:
    """Raise the one error of these checks: ``file``, what is wrong with it, what to do."""
    raise PreparedDataError(
        f"{file} {problem}. The folder is not a dataset as recsys-prep writes it (or it was "
        f"damaged since); prepare it again with `{MAKE_ONE.format(folder=file.parent)}`."
    )


def shown(value: Any, width: int = 40) -> str:
    """``value`` as JSON for a message, cut to ``width`` characters."""
    text = json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def read_parquet(
    file: Path, columns: Mapping[str, str], footer_only: Collection[str] = ()
) -> pl.DataFrame:
    """The ``columns`` (name -> kind) of ``file`` but ``footer_only``, whose presence and type
    are all that is checked; integer columns cast to Int64."""
    if not file.is_file():  # also refuses a folder, a fifo or a device in its place
        refuse(file, "is missing (or not a regular file)")
    try:
        found = pl.read_parquet_schema(file)
    except UNREADABLE as error:
        refuse(
            file, f"is not a readable parquet file (cut short or another format: {_brief(error)})"
        )
    for name, kind in columns.items():
        if name not in found:
            refuse(file, f"has no column {name!r} (it has: {', '.join(found) or 'none'})")
        if not KINDS[kind](found[name]):
            refuse(file, f"has column {name!r} of type {found[name]}; expected {kind}")
    read = [name for name in columns if name not in footer_only]
    try:
        frame = pl.read_parquet(file, columns=read)
    except UNREADABLE as error:
        refuse(file, f"is damaged and cannot be read ({_brief(error)})")
    return frame.cast({n: CAST[columns[n]] for n in read if columns[n] in CAST})


def _brief(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


# ---------------------------------------------------------------------------- row rules


@dataclass(frozen=True)
class Rule:
    """A property every row of a table must have.

    Attributes:
        problem: what a failing table has, as the message says it.
        passed: aggregate, True when every row has the property.
        ok: per row, False for an offending row (found only after ``passed`` fails).
        show: per row, what the message shows of the first offending row.
    """

    problem: str
    passed: pl.Expr
    ok: pl.Expr
    show: tuple[pl.Expr, ...]


def each_row(problem: str, ok: pl.Expr) -> Rule:
    """A rule on every row; a null counts as a failure. The message shows the row's values of
    the columns ``ok`` reads."""
    ok = ok.fill_null(False)
    return Rule(problem, ok.all(), ok, tuple(map(pl.col, dict.fromkeys(ok.meta.root_names()))))


def each_element(problem: str, column: str, ok: Callable[[pl.Expr], pl.Expr]) -> Rule:
    """A rule on every element of the list ``column``; a null element or list is a failure.
    Checked over the flat values (no per-row work); the message shows the first offending
    element's position in its list and its value."""
    bad = ~ok(pl.element()).fill_null(False)
    position = pl.col(column).list.eval(bad).list.arg_max()
    return Rule(
        problem,
        ok(pl.col(column).explode()).fill_null(False).all(),
        ~pl.col(column).list.eval(bad).list.any().fill_null(True),
        (position.alias("position"), pl.col(column).list.get(position, null_on_oob=True)),
    )


def check_rules(file: Path, frame: pl.DataFrame, rules: Sequence[Rule]) -> None:
    """Refuse ``file`` at the first rule ``frame`` breaks, pointing at the first bad row."""
    passed = frame.select(*(r.passed.alias(str(i)) for i, r in enumerate(rules))).row(0)
    for rule, fine in zip(rules, passed, strict=True):
        if not fine:
            row = (
                frame.with_row_index("row")
                .filter(~rule.ok)
                .select("row", *rule.show)
                .row(0, named=True)
            )
            values = ", ".join(f"{k} = {shown(v)}" for k, v in row.items() if k != "row")
            refuse(file, f"{rule.problem} (first at row {row['row']}: {values})")
