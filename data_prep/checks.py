"""Checks of the canonical log's values: one-paragraph errors naming the file and line.

* :func:`check_values` runs one streaming aggregate over the whole canonical log (row count,
  missing ids, timestamp range) and, only when something is wrong, a query that finds the first
  offending row, reported as its line (or Parquet row) with the value the file holds there;
  :func:`check_ratings` does the same for the ratings that ``min_rating`` filters on.
The file itself (missing, binary, wrong separator) is checked before any reader runs, by
:mod:`data_prep.sniff`, parser errors are located by :mod:`data_prep.lines`, and the prep
options are checked by :mod:`recsys_seq.core.option_checks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from data_prep import ids, schema, steps
from data_prep.formats import has_clock, source_column
from data_prep.lines import first_misfit, parse_error, where
from data_prep.prep_error import PrepError
from data_prep.readers import scan_source
from data_prep.schema import ROW

# later than any real behaviour log: 2100-01-01 in each unit; larger values mean a wrong unit
LATEST = {"s": 4_102_444_800, "ms": 4_102_444_800_000, "us": 4_102_444_800 * 10**6}
LATEST["ns"] = 4_102_444_800 * 10**9


def check_records(path: Path, fmt: Mapping[str, Any]) -> None:
    """Every record of a delimited log has the header's (or ``format.names``') number of
    fields, wherever it is: the sniff reads the file's head only, and past it a parser pads a
    short row with nulls (an event type or category silently missing) and a line split on
    ``::`` shifts its fields (a rating read as the clock)."""
    reader = fmt.get("reader", "csv")
    if reader not in ("csv", "diginetica"):
        return
    separator = fmt.get("separator", ";" if reader == "diginetica" else ",")
    names = fmt.get("names") if reader == "csv" else None
    has_header = reader == "diginetica" or bool(fmt.get("has_header", True))
    quote = fmt.get("quote_char", '"') if len(separator) == 1 else None
    misfit = first_misfit(path, separator, quote, has_header, len(names) if names else None)
    if misfit is not None:
        what = f"format.names {list(names)}" if names else "the header (line 1)"
        raise PrepError(f"{path}, {misfit.describe(separator, what)}")


def check_values(
    raw: pl.LazyFrame, path: Path, fmt: Mapping[str, Any], drop_null_ids: bool
) -> dict[str, int]:
    """Profile the canonical log (rows, nulls, time range) and raise on the first bad value.

    Ids that are present but cannot be ids (the float 1.5) are refused even with
    ``drop_null_ids``: they mean a wrong column mapping, not a row to skip.

    Args:
        raw: the canonical log (:func:`data_prep.formats.scan`) with the row number ``ROW``.
        drop_null_ids: missing ids are dropped later (``null_ids=drop``) instead of an error.
    Returns:
        ``rows``, ``without_ids`` (rows missing a user or an item id: refused unless
        ``drop_null_ids``) and, for a log with a clock, ``min_time`` / ``max_time``.
    """
    user, item, ts = schema.RAW_USER, schema.RAW_ITEM, schema.RAW_TIMESTAMP
    clock = has_clock(fmt)
    latest = LATEST[fmt.get("timestamp_unit", "s")]
    stats = raw.select(
        pl.len().alias("rows"),
        pl.col(user).null_count().alias("null_user"),
        pl.col(item).null_count().alias("null_item"),
        (pl.col(user).is_null() | pl.col(item).is_null()).sum().alias("without_ids"),
        pl.col(ts).null_count().alias("null_ts"),
        pl.col(ts).min().alias("min_time"),
        pl.col(ts).max().alias("max_time"),
    )
    row = _collect(stats, path, fmt).row(0, named=True)
    if row["rows"] == 0:
        raise PrepError(f"Input file {path} has no data rows (format {fmt.get('name')!r}).")
    nulls = [c for c, key in ((user, "null_user"), (item, "null_item")) if row[key]]
    _check_float_ids(nulls, path, fmt)  # invalid floats are null in raw: find them first
    problems = []  # (condition, column, what is wrong, what to do)
    if not drop_null_ids:
        problems += [
            (
                pl.col(c).is_null(),
                c,
                f"the {_ID_NAMES[c]} (column {source_column(fmt, c)!r}) is missing",
                "Fill in the id (empty, whitespace, null and NaN are missing), or use "
                "null_ids=drop to skip rows without ids.",
            )
            for c in nulls
        ]
    if clock:
        col = source_column(fmt, ts)
        unit = fmt.get("timestamp_unit", "s")
        problems += [
            (
                pl.col(ts).is_null(),
                ts,
                f"the timestamp (column {col!r}) is missing or not a number or date",
                f"Timestamps are numbers in format.timestamp_unit ({unit!r}), dates or ISO 8601 "
                "date-times such as 2017-11-25T08:00:00Z (or set format.timestamp_format).",
            ),
            (pl.col(ts) < 0, ts, f"the timestamp (column {col!r}) is negative", ""),
            (
                pl.col(ts) > latest,
                ts,
                f"the timestamp (column {col!r}) is after the year 2100 in unit {unit!r}",
                "Milliseconds read as seconds? Set format.timestamp_unit=ms.",
            ),
        ]
    needs_look = (
        (not drop_null_ids and nulls)
        or (clock and row["null_ts"])
        or (clock and row["min_time"] is not None and row["min_time"] < 0)
        or (clock and row["max_time"] is not None and row["max_time"] > latest)
    )
    if needs_look:
        for condition, column, message, to_do in problems:
            bad = _collect(raw.filter(condition).select(ROW).head(1), path, fmt)
            if bad.height:
                count = _collect(raw.filter(condition).select(pl.len()), path, fmt).item()
                first = bad.item()
                raise PrepError(
                    f"{path}, {where(first, path, fmt)}: {message}"
                    f"{_count(count, first, column, path, fmt)}. {to_do}".strip()
                )
    kept = ("rows", "without_ids", *(("min_time", "max_time") if clock else ()))
    return {k: row[k] for k in kept}


_ID_NAMES = {schema.RAW_USER: "user id", schema.RAW_ITEM: "item id"}


def _check_float_ids(columns: list[str], path: Path, fmt: Mapping[str, Any]) -> None:
    """Refuse float ids that are not integers (see :mod:`data_prep.ids`), naming the first."""
    if not columns:
        return
    source = scan_source(path, fmt)
    types = source.collect_schema()
    for column in columns:
        if ids.kind(types[column]) != "float":
            continue
        invalid = ids.invalid(pl.col(column), types[column])
        found = source.with_row_index(ROW).filter(invalid).select(ROW, column)
        bad = _collect(found.head(1), path, fmt)
        if bad.height:
            count = _collect(found.select(pl.len()), path, fmt).item()
            name = source_column(fmt, column)
            raise PrepError(
                f"{path}, {where(bad[ROW].item(), path, fmt)}: the {_ID_NAMES[column]} (column "
                f"{name!r}) is {bad[column].item()!r}, a float that is not an integer id "
                f"({count:,} such rows). A fractional or infinite id usually means "
                f"a wrong column mapping (check format.columns.{column}); ids beyond 2^53 "
                "cannot be floats: write them as integers or text."
            )


def _count(count: int, row: int, canonical: str, path: Path, fmt: Mapping[str, Any]) -> str:
    """``(3 such rows; this one holds 'yesterday')``: how many, and the value the file holds
    in the first one (what a reader needs to find it), when it holds one."""
    try:
        value = (
            scan_source(path, fmt)
            .with_row_index(ROW)
            .filter(pl.col(ROW) == row)  # not .slice: polars' JSON reader slices blank lines
            .select(canonical)
            .collect()
            .to_series()
            .to_list()
        )
    except pl.exceptions.PolarsError:
        value = []
    held = f"; this one holds {value[0]!r}" if value and value[0] is not None else ""
    return f" ({count:,} such rows{held})"


def check_ratings(
    raw: pl.LazyFrame, path: Path, fmt: Mapping[str, Any], min_rating: float, drop: bool
) -> None:
    """Before ``min_rating`` filters: every rating is a number, or missing (empty, null, NaN).

    A rating that is not a number (``abc``, ``inf``) is refused: the column is not ratings. A
    missing rating cannot pass a threshold: it is refused, or with ``drop`` (``null_ids=drop``)
    its row is dropped by the filter, as a missing id is.
    """
    column = source_column(fmt, schema.RAW_RATING)
    dtype = raw.collect_schema()[schema.RAW_RATING]
    try:
        rating = steps.numbers(schema.RAW_RATING, dtype)
    except TypeError:
        raise PrepError(
            f"{path}: min_rating={min_rating} needs numeric ratings, and the rating column "
            f"{column!r} holds {dtype} values. Check format.columns.rating."
        ) from None
    checks = [(rating.unreadable, "is not a number", "Check format.columns.rating.")]
    if not drop:
        checks.append(
            (
                rating.missing,
                "is missing (empty, null or NaN), so min_rating cannot judge it",
                "Fill it in, or use null_ids=drop to drop rows without a rating.",
            )
        )
    counts = _collect(
        raw.select(*(c.sum().alias(str(i)) for i, (c, _, _) in enumerate(checks))), path, fmt
    ).row(0)
    for (condition, problem, to_do), count in zip(checks, counts, strict=True):
        if count:
            found = raw.with_row_index(ROW).filter(condition).select(ROW).head(1)
            first = _collect(found, path, fmt).item()
            raise PrepError(
                f"{path}, {where(first, path, fmt)}: the rating (column {column!r}) {problem}"
                f"{_count(count, first, schema.RAW_RATING, path, fmt)}. {to_do}"
            )


def _collect(lf: pl.LazyFrame, path: Path, fmt: Mapping[str, Any]) -> pl.DataFrame:
    try:
        return lf.collect(engine="streaming")
    except pl.exceptions.PolarsError as err:
        raise parse_error(err, path, fmt) from None
