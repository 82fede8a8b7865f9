"""The item table read and checked: one row per item, its id canonical, each attribute parsed by
its kind; every refusal is one paragraph naming the file, the line and the column::

    column        read as                                    refused
    id            canonical id text (data_prep/ids.py:       missing, a float that is no id,
                  " 014" and 14 are the item "14")           an id twice (naming both lines)
    categorical   stripped text                              lists, structs
    multi         the distinct stripped values, in order     structs
                  (text split on multi_separator; a list
                  column as it is)
    flags         the names of the columns that hold 1       a value other than 0, 1, empty
    numeric       Float64 (data_prep.steps.numbers)          text that is not a finite number

Empty text and the format's ``null_values`` (whole fields, after stripping) are missing; a
blank line (a row with nothing in it) is no row. The table is collected once, whole: it is
small, and every check needs all of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from data_prep import ids, schema, steps
from data_prep.inputs import file_sha256
from data_prep.item_formats import OPTION, attributes, source_columns
from data_prep.item_readers import decoded, json_nested_rows, scan_items, table_line
from data_prep.lines import LOCATE_ERRORS
from data_prep.prep_error import PrepError
from data_prep.schema import CATEGORICAL, MULTI, ROW

READ_ERRORS = (*LOCATE_ERRORS, pl.exceptions.PanicException, EOFError)


@dataclass(frozen=True)
class ItemTable:
    """A checked item table.

    Attributes:
        frame: ``original_id`` (canonical id text, unique) and one column per attribute: String
            (categorical), List[String] (multi), Float64 (numeric); null = missing.
        kinds: attribute name -> kind, in column order.
        rows: the table's rows (blank lines not counted).
    """

    path: Path
    format: str
    sha256: str
    rows: int
    frame: pl.DataFrame
    kinds: dict[str, str]


# the canonical id column of ItemTable.frame: a name no attribute may have (schema.ITEM_COLUMNS)
KEY = schema.ORIGINAL_ID


def read_item_table(path: str | Path, fmt: Mapping[str, Any]) -> ItemTable:
    """Read and check the item table ``path`` in the checked item format ``fmt``
    (:func:`data_prep.item_formats.load_item_format`).

    Raises:
        PrepError: naming the file (and the line and column where there is one).
    """
    path = Path(path)
    kinds = attributes(fmt)
    raw = _read(path, fmt)
    frame = (
        _canonical_ids(raw, path, fmt)
        .with_columns(_attribute(raw, name, kind, path, fmt) for name, kind in kinds.items())
        .collect()
    )
    if frame.height == 0:
        raise PrepError(f"Item table {path} has no rows (a header only, or blank lines).")
    _check_ids(frame, raw, path, fmt)
    return ItemTable(
        path=path,
        format=str(fmt.get("name")),
        sha256=file_sha256(path),
        rows=frame.height,
        frame=frame.select(pl.col(fmt["id"]).alias(KEY), *kinds),
        kinds=kinds,
    )


def _read(path: Path, fmt: Mapping[str, Any]) -> pl.DataFrame:
    """The columns the format reads, with ``ROW``, nulls for ``null_values`` and empty text,
    blank rows left out."""
    try:
        lf = scan_items(path, fmt)
        found = lf.collect_schema()
        wanted = source_columns(fmt)
        missing = [column for column in wanted if column not in found]
        if missing or not attributes(fmt):
            raise _unmapped(path, fmt, missing, found.names())
        frame = lf.select(wanted).with_row_index(ROW).collect()  # a table's own _row unread
    except READ_ERRORS as err:
        raise _unreadable(err, path, fmt) from None
    nulls = pl.Series(fmt["null_values"], dtype=pl.String).implode()
    text = [name for name in wanted if frame.schema[name] == pl.String]
    stripped = {name: pl.col(name).str.strip_chars() for name in text}
    frame = frame.with_columns(
        pl.when((value == "") | value.is_in(nulls)).then(None).otherwise(pl.col(name)).alias(name)
        for name, value in stripped.items()
    )
    return frame.filter(~pl.all_horizontal(pl.col(wanted).is_null()))


def _unmapped(
    path: Path, fmt: Mapping[str, Any], missing: list[str], found: list[str]
) -> PrepError:
    name = fmt.get("name")
    if missing:
        problem = f"Item table {path} has no column {', '.join(map(repr, missing))}, which "
        problem += f"{OPTION} {name!r} names"
    else:
        problem = f"{OPTION} {name!r} names no attribute column of item table {path}"
    return PrepError(
        f"{problem}; its columns are {found}. Name the id column and the attributes after "
        f"the format: {OPTION}={name} {OPTION}.id=<column> and {OPTION}.categorical=[...], "
        f"{OPTION}.multi=[...] or {OPTION}.numeric=[...]"
        + (" (or check the separator and has_header)." if fmt["reader"] == "csv" else ".")
    )


def _unreadable(err: BaseException, path: Path, fmt: Mapping[str, Any]) -> PrepError:
    message = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if "utf-8" in message.lower() and fmt["reader"] != "parquet":
        try:  # a byte past the sniffed head: the message names its line
            decoded(path, fmt.get("encoding", "utf-8"))
        except PrepError as located:
            return located
    return PrepError(
        f"Could not read item table {path} as {OPTION} {fmt.get('name')!r}: {message}. Check "
        f"the file and {OPTION} (reader, separator, quote_char, encoding)."
    )


def _refuse(
    frame: pl.DataFrame,
    bad: pl.Expr,
    column: str,
    what: Callable[[Any], str],
    path: Path,
    fmt: Mapping[str, Any],
) -> None:
    """Raise for the first row where ``bad`` holds: ``<file>, line N: <what(value)> (k such
    rows).``, ``value`` being the row's value of ``column``."""
    found = frame.filter(bad.fill_null(False)).select(ROW, column)
    if found.height:
        row, value = found.row(0)
        more = f" ({found.height:,} such rows)" if found.height > 1 else ""
        raise PrepError(f"{path}, {table_line(row, path, fmt)}: {what(value)}{more}.")


def _canonical_ids(raw: pl.DataFrame, path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """``raw`` with its ids canonical, as text (:mod:`data_prep.ids`); refuses a column type
    that holds no ids and floats that are none."""
    column = fmt["id"]
    dtype = raw.schema[column]
    if ids.kind(dtype) is None:
        raise PrepError(
            f"{path}: the item id column {column!r} holds {dtype} values; ids are integers "
            f"or text. Check {OPTION}.id."
        )
    _refuse(
        raw,
        ids.invalid(pl.col(column), dtype),
        column,
        lambda value: (
            f"the item id (column {column!r}) is {value!r}, a float that is not an integer id"
        ),
        path,
        fmt,
    )
    canonical = ids.canonical(raw.lazy(), column, dtype)
    return canonical.with_columns(pl.col(column).cast(pl.String))


def _check_ids(frame: pl.DataFrame, raw: pl.DataFrame, path: Path, fmt: Mapping[str, Any]) -> None:
    """Every row has an id, and no id is on two rows (naming both lines)."""
    column = fmt["id"]
    _refuse(
        frame,
        pl.col(column).is_null(),
        column,
        lambda _: f"the item id (column {column!r}) is missing; fill it in or remove the row",
        path,
        fmt,
    )
    repeat = (
        frame.with_columns(pl.col(ROW).first().over(column).alias("_first"))
        .filter(pl.col(ROW) != pl.col("_first"))
        .sort(ROW)
    )
    if repeat.height:
        second = repeat.row(0, named=True)
        shown = raw.filter(pl.col(ROW).is_in([second["_first"], second[ROW]]))[column].to_list()
        first, then = (table_line(second[key], path, fmt) for key in ("_first", ROW))
        raise PrepError(
            f"{path}, {first} and {then}: "
            f"the item id {second[column]!r} is on two rows (as {shown[0]!r} and "
            f"{shown[1]!r}; ids compare as data_prep/ids.py says, ' 014' and 14 are one item)"
            f"{_more(repeat.height)}. An item table has one row per item."
        )


def _more(count: int) -> str:
    return f" ({count - 1:,} more repeated row(s))" if count > 1 else ""


def _attribute(
    raw: pl.DataFrame, name: str, kind: str, path: Path, fmt: Mapping[str, Any]
) -> pl.Expr:
    """The attribute ``name`` parsed by its kind (see the module's table)."""
    if name in fmt["flags"]:
        return _flags(raw, name, fmt["flags"][name], path, fmt)
    dtype = raw.schema[name]
    col = pl.col(name)
    if fmt["reader"] == "jsonl" and dtype == pl.String:
        _refuse_mixed_json(raw, name, path, fmt)
    if kind == CATEGORICAL:
        if dtype.is_nested():
            raise _wrong_type(path, name, dtype, "categorical", "one value per item")
        return col.cast(pl.String).str.strip_chars().alias(name)
    if kind == MULTI:
        if isinstance(dtype, pl.List) and not dtype.inner.is_nested():
            values = col.cast(pl.List(pl.String))
        elif not dtype.is_nested():
            values = col.cast(pl.String).str.split(fmt["multi_separator"])
        else:
            raise _wrong_type(path, name, dtype, "multi", "text or lists of values")
        value = pl.element().str.strip_chars()
        return values.list.eval(value.filter(value != "")).list.unique(maintain_order=True)
    try:
        number = steps.numbers(name, dtype)
    except TypeError:
        raise _wrong_type(path, name, dtype, "numeric", "numbers") from None
    _refuse(
        raw,
        number.unreadable,
        name,
        lambda value: f"column {name!r} (in {OPTION}.numeric) is {value!r}, not a number",
        path,
        fmt,
    )
    return number.value.alias(name)


def _refuse_mixed_json(raw: pl.DataFrame, name: str, path: Path, fmt: Mapping[str, Any]) -> None:
    """A JSON column of text on some lines and arrays or objects on others: refused, not
    read as their JSON text."""
    nested = json_nested_rows(path, name)
    if nested is None:
        return
    _refuse(
        raw,
        pl.col(ROW).is_in(nested.implode())
        & (pl.col(name).str.starts_with("[") | pl.col(name).str.starts_with("{")),
        name,
        lambda value: (
            f"column {name!r} holds {value[:40]!r}, an array or object, where other lines hold "
            "text; give every line one kind of value (text, or a list of texts for multi)"
        ),
        path,
        fmt,
    )
    raise PrepError(
        f"{path}: column {name!r} holds arrays or objects on some lines and text on others; "
        "give every line one kind of value (text, or a list of texts for multi)."
    )


def _flags(
    raw: pl.DataFrame, name: str, columns: list[str], path: Path, fmt: Mapping[str, Any]
) -> pl.Expr:
    """The names of the 0/1 ``columns`` that hold 1, as one list (``[]`` for none)."""
    flagged = []
    for column in columns:
        try:
            number = steps.numbers(column, raw.schema[column])
        except TypeError:
            raise _wrong_type(path, column, raw.schema[column], "flag", "0 or 1") from None
        _refuse(
            raw,
            number.unreadable | ~number.value.is_in([0.0, 1.0]).fill_null(True),
            column,
            lambda value, column=column: (
                f"column {column!r} (in {OPTION}.flags.{name}) is {value!r}, not a 0/1 flag"
            ),
            path,
            fmt,
        )
        flagged.append(pl.when(number.value == 1).then(pl.lit(column)))
    return pl.concat_list(flagged).list.drop_nulls().alias(name)


def _wrong_type(path: Path, column: str, dtype: pl.DataType, kind: str, holds: str) -> PrepError:
    return PrepError(
        f"{path}: column {column!r} holds {dtype} values, and a {kind} attribute holds "
        f"{holds}. Check {OPTION}."
    )
