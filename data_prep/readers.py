"""Readers: a raw file of some format as a LazyFrame with its mapped source columns renamed to
the canonical raw names of :mod:`data_prep.schema`, values as in the file::

    user_id   item_id   timestamp   [event_type]   [category]   [rating]

A format's ``reader`` key names a reader registered here (:data:`READERS`); the rest of the
format mapping are that reader's options. A reader builds a plan and never collects, and it
leaves the values as the file holds them (:func:`scan_source`), so that a check can still see
what the file holds; :func:`data_prep.formats.scan` then makes them canonical. Formats without
a clock (``timestamp: null`` in the mapping) get the file's row order, which is the documented
order of files like SASRec's ``user item`` lists.

Adding a format: write a function ``(path, fmt) -> LazyFrame`` decorated with
``@register("name")`` that ends with ``_select_mapped`` (or reuse ``csv`` with options), and
add ``conf/format/<name>.yaml`` (:mod:`data_prep.formats` loads it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from data_prep import schema
from data_prep.lines import INFER_ROWS, check_header, int_columns, parse_error, text_fields
from data_prep.prep_error import PrepError

CANONICAL = (
    schema.RAW_USER,
    schema.RAW_ITEM,
    schema.RAW_TIMESTAMP,
    schema.RAW_EVENT,
    schema.RAW_CATEGORY,
    schema.RAW_RATING,
)
REQUIRED = (schema.RAW_USER, schema.RAW_ITEM)

Reader = Callable[[Path, Mapping[str, Any]], pl.LazyFrame]
READERS: dict[str, Reader] = {}


def register(name: str) -> Callable[[Reader], Reader]:
    def deco(fn: Reader) -> Reader:
        READERS[name] = fn
        return fn

    return deco


def reader_for(fmt: Mapping[str, Any]) -> Reader:
    """The reader that the format names (``csv`` when it names none)."""
    reader = READERS.get(fmt.get("reader", "csv"))
    if reader is None:
        raise PrepError(
            f"Format {fmt.get('name')!r} names reader {fmt.get('reader')!r}, which does not "
            f"exist; readers: {', '.join(sorted(READERS))}."
        )
    return reader


def scan_source(path: str | Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """The mapped columns of ``path`` with their values as in the file (not canonical): what
    a check reads to say why a canonical value is missing (e.g. the float id 1.5)."""
    return reader_for(fmt)(Path(path), fmt)


def read_schema(lf: pl.LazyFrame, path: Path, fmt: Mapping[str, Any]) -> pl.Schema:
    """The frame's schema; a file the reader cannot parse becomes a PrepError naming the line
    where that can be found (JSON lines whose values do not fit one type, say)."""
    try:
        return lf.collect_schema()
    except Exception as err:  # polars raises several error types for unreadable files
        raise parse_error(err, path, fmt) from None


def _select_mapped(lf: pl.LazyFrame, path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Rename mapped source columns to canonical names; check they exist; add a row clock.
    Values keep their source types: :func:`data_prep.formats.scan` makes them canonical."""
    mapping = {k: v for k, v in (fmt.get("columns") or {}).items() if v is not None}
    unknown = set(mapping) - set(CANONICAL)
    if unknown:
        raise PrepError(
            f"Format {fmt.get('name')!r} maps unknown canonical column(s) {sorted(unknown)}; "
            f"the canonical columns are {', '.join(CANONICAL)}."
        )
    available = read_schema(lf, path, fmt).names()
    for canonical in REQUIRED:
        if canonical not in mapping:
            raise PrepError(f"Format {fmt.get('name')!r} does not map the {canonical!r} column.")
    # the default identity mapping of an optional column is dropped when the file lacks it
    mapping = {
        c: src
        for c, src in mapping.items()
        if src in available or c in REQUIRED or c == schema.RAW_TIMESTAMP or src != c
    }
    missing = [src for src in mapping.values() if src not in available]
    if missing:
        raise PrepError(
            f"Column(s) {', '.join(map(repr, missing))} not found in {path}; the file has "
            f"{_what_columns(fmt)} {available}. Fix the mapping with "
            f"format.columns.<canonical>=<column> (or null for an optional column)"
            f"{_layout_hint(fmt)}."
        )
    lf = lf.select(pl.col(src).alias(canonical) for canonical, src in mapping.items())
    if schema.RAW_TIMESTAMP not in mapping:
        # no clock: file order is the time order
        lf = lf.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias(schema.RAW_TIMESTAMP))
    return lf


def _what_columns(fmt: Mapping[str, Any]) -> str:
    return "keys" if fmt.get("reader") == "jsonl" else "columns"


def _layout_hint(fmt: Mapping[str, Any]) -> str:
    if fmt.get("reader") in ("csv", "diginetica"):
        return ", or check format.separator / has_header"
    return ""


@register("csv")
def read_csv(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Delimited text (``.gz`` allowed). Options: ``separator`` (several characters allowed,
    e.g. ``::``), ``has_header``, ``names`` (column names when there is no header),
    ``columns`` (canonical -> source column), ``null_values``, ``timestamp_format``."""
    sep = fmt.get("separator", ",")
    names = list(fmt["names"]) if fmt.get("names") else None
    has_header = bool(fmt.get("has_header", True))
    if len(sep) == 1:
        lf = pl.scan_csv(
            path,
            separator=sep,
            has_header=has_header,
            new_columns=names,
            null_values=fmt.get("null_values"),
            quote_char=fmt.get("quote_char", '"'),
            infer_schema_length=INFER_ROWS,
        )
        check_header(lf, path)
    else:
        # polars separators are one byte: split each line on the multi-character separator
        if has_header or not names:
            raise PrepError(
                f"Format {fmt.get('name')!r}: the multi-character separator {sep!r} needs "
                "has_header: false and names: [...]."
            )
        lf = _infer_ints(text_fields(path, fmt), names)
    return _select_mapped(lf, path, fmt)


def _infer_ints(lf: pl.LazyFrame, names: list[str]) -> pl.LazyFrame:
    """Columns split from text are strings; make the all-integer ones Int64 (ids, clocks).

    Decided on the first rows; a later value that is not an integer fails the read, and
    :func:`data_prep.lines.parse_error` names its line."""
    return lf.with_columns(pl.col(n).cast(pl.Int64) for n in int_columns(lf, names))


@register("diginetica")
def read_diginetica(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """DIGINETICA train-item-views: ``session_id;user_id;item_id;timeframe;eventdate``.

    ``eventdate`` is a day and ``timeframe`` milliseconds since the session start, so the clock
    is ``epoch_ms(eventdate) + timeframe`` (``timestamp_unit: ms``). Sessions are the users of
    session-based recommendation (``user_id`` is mostly ``NA``), so the default mapping uses
    ``session_id``; map ``user_id: user_id`` for the logged-in users only.
    """
    day = pl.col("eventdate").str.to_date("%Y-%m-%d", strict=False).cast(pl.Datetime("ms"))
    lf = pl.scan_csv(
        path,
        separator=fmt.get("separator", ";"),
        has_header=True,
        null_values=fmt.get("null_values") or ["NA"],
        infer_schema_length=INFER_ROWS,
    )
    if {"eventdate", "timeframe"} <= set(read_schema(lf, path, fmt).names()):
        lf = lf.with_columns((day.dt.epoch("ms") + pl.col("timeframe")).alias("_clock"))
    return _select_mapped(lf, path, fmt)


@register("parquet")
def read_parquet(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Parquet file. Options: ``columns``, ``timestamp_format`` (for string timestamps)."""
    return _select_mapped(pl.scan_parquet(path), path, fmt)


@register("jsonl")
def read_jsonl(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Newline-delimited JSON (one object per line). Options: ``columns``, ``timestamp_format``."""
    return _select_mapped(pl.scan_ndjson(path, infer_schema_length=INFER_ROWS), path, fmt)


@register("user_lines")
def read_user_lines(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """One user per line: ``user item item ...`` (S3-Rec style), items in time order.

    The timestamp is the item's position in the line. Options: ``separator`` (default space).
    """
    lf = _infer_ints(text_fields(path, fmt), [schema.RAW_USER, schema.RAW_ITEM])
    mapping = {c: c for c in (schema.RAW_USER, schema.RAW_ITEM, schema.RAW_TIMESTAMP)}
    return _select_mapped(lf, path, {**fmt, "columns": mapping})
