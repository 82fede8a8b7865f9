"""Readers: map a raw file of some format to a LazyFrame with the canonical raw columns.

A *format* is a small mapping (one ``conf/format/<name>.yaml`` each) whose ``reader`` key names
a reader function registered here; the rest are that reader's options. Every reader returns a
LazyFrame with the canonical columns of :mod:`data_prep.schema`::

    user_id   item_id   timestamp   [event_type]   [category]   [rating]

``timestamp`` is an integer in the format's ``timestamp_unit`` (s by default; strings and dates
are converted to it); formats without a clock (``timestamp: null`` in the mapping) get the
file's row order, which is the documented order of files like SASRec's ``user item`` lists.
A reader builds a plan and never collects. Before a reader runs, :mod:`data_prep.checks`
sniffs the file's head (missing, empty, binary, wrong separator, wrong field count) so that
those errors name the file and line instead of surfacing as a parser error.

Adding a format: write a function ``(path, fmt) -> LazyFrame`` decorated with
``@register("name")`` (or reuse ``csv`` with options) and add ``conf/format/<name>.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from data_prep import schema

CANONICAL = (
    schema.RAW_USER,
    schema.RAW_ITEM,
    schema.RAW_TIMESTAMP,
    schema.RAW_EVENT,
    schema.RAW_CATEGORY,
    schema.RAW_RATING,
)
REQUIRED = (schema.RAW_USER, schema.RAW_ITEM)
ROW = "_row"  # original row number, the deterministic tie break (added by the prep job)

Reader = Callable[[Path, Mapping[str, Any]], pl.LazyFrame]
READERS: dict[str, Reader] = {}

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

# The generic CSV format, as in conf/format/csv.yaml (kept in code for the bundled demo, which
# must work without the conf/ folder, e.g. from an installed wheel).
CSV_FORMAT: dict[str, Any] = {
    "name": "csv",
    "reader": "csv",
    "separator": ",",
    "has_header": True,
    "names": None,
    "columns": {c: c for c in CANONICAL},
    "null_values": None,
    "timestamp_format": None,
    "timestamp_unit": "s",
}
TIME_UNITS = ("s", "ms", "us", "ns")


class PrepError(Exception):
    """A user error (bad path, column, option or empty result): reported without a traceback."""


def register(name: str) -> Callable[[Reader], Reader]:
    def deco(fn: Reader) -> Reader:
        READERS[name] = fn
        return fn

    return deco


def load_format(fmt: str | Mapping[str, Any]) -> dict[str, Any]:
    """Return a format mapping: given as a mapping, or by name from ``conf/format/<name>.yaml``."""
    if not isinstance(fmt, str):
        return dict(fmt)
    if fmt == "csv":
        return dict(CSV_FORMAT)
    path = CONF_DIR / "format" / f"{fmt}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (CONF_DIR / "format").glob("*.yaml"))
        raise PrepError(f"Unknown format {fmt!r}: no {path}. Known formats: {', '.join(known)}.")
    from omegaconf import OmegaConf  # hydra's dependency; only needed for names

    return dict(OmegaConf.to_container(OmegaConf.load(path), resolve=True))


def scan(path: str | Path, fmt: str | Mapping[str, Any]) -> pl.LazyFrame:
    """Plan the read of ``path`` in format ``fmt``: canonical columns, nothing collected.

    Raises:
        PrepError: the file does not exist, the reader is unknown, or a mapped column is missing.
    """
    from data_prep.checks import check_file

    fmt = load_format(fmt)
    path = Path(path)
    reader = READERS.get(fmt.get("reader", "csv"))
    if reader is None:
        raise PrepError(
            f"Format {fmt.get('name')!r} names reader {fmt.get('reader')!r}, which does not "
            f"exist; readers: {', '.join(sorted(READERS))}."
        )
    if fmt.get("timestamp_unit", "s") not in TIME_UNITS:
        raise PrepError(
            f"format.timestamp_unit must be one of {', '.join(TIME_UNITS)}, "
            f"not {fmt.get('timestamp_unit')!r}."
        )
    check_file(path, fmt)
    return reader(path, fmt)


def has_clock(fmt: Mapping[str, Any]) -> bool:
    """Whether the format maps a real clock (else the timestamp is the file's row order)."""
    return (
        fmt.get("reader") not in ("user_lines",)
        and (fmt.get("columns") or {}).get(schema.RAW_TIMESTAMP, schema.RAW_TIMESTAMP) is not None
    )


def _select_canonical(lf: pl.LazyFrame, path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Rename mapped source columns to canonical names; check they exist; add a row clock."""
    mapping = {k: v for k, v in (fmt.get("columns") or {}).items() if v is not None}
    unknown = set(mapping) - set(CANONICAL)
    if unknown:
        raise PrepError(
            f"Format {fmt.get('name')!r} maps unknown canonical column(s) {sorted(unknown)}; "
            f"the canonical columns are {', '.join(CANONICAL)}."
        )
    try:
        available = lf.collect_schema().names()
    except Exception as err:  # polars raises several error types for unreadable files
        raise PrepError(f"Could not read {path} as format {fmt.get('name')!r}: {err}") from None
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
            f"columns {available}. Fix the mapping with format.columns.<canonical>=<column> "
            f"(or null for an optional column), or check format.separator / has_header."
        )
    exprs = [pl.col(src).alias(canonical) for canonical, src in mapping.items()]
    lf = lf.select(exprs)
    if schema.RAW_TIMESTAMP not in mapping:
        # no clock: file order is the time order
        lf = lf.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias(schema.RAW_TIMESTAMP))
    return lf.with_columns(_timestamp_expr(lf, fmt))


def _timestamp_expr(lf: pl.LazyFrame, fmt: Mapping[str, Any]) -> pl.Expr:
    """Timestamp as Int64: integers stay, floats truncate, datetimes/strings become unix seconds."""
    """Timestamp as Int64 in ``timestamp_unit``: integers stay, floats truncate, datetimes and
    strings become epoch values. Unparseable values become null (not an exception) so that
    :mod:`data_prep.checks` can report the first offending line instead of a parser error."""
    ts = pl.col(schema.RAW_TIMESTAMP)
    unit = fmt.get("timestamp_unit", "s")
    dtype = lf.collect_schema()[schema.RAW_TIMESTAMP]
    if dtype == pl.String:
        numeric = ts.str.strip_chars().cast(pl.Int64, strict=False)
        if fmt.get("timestamp_format"):
            parsed = ts.str.to_datetime(fmt["timestamp_format"], strict=False)
        else:
            parsed = ts.str.to_datetime(strict=False, time_unit="us")
        ts = pl.coalesce(numeric, parsed.dt.epoch(unit))
    elif dtype == pl.Date:
        ts = ts.cast(pl.Datetime("ms")).dt.epoch(unit)
    elif isinstance(dtype, pl.Datetime):
        ts = ts.dt.epoch(unit)
    elif dtype.is_float():
        ts = ts.floor()
    return ts.cast(pl.Int64, strict=False).alias(schema.RAW_TIMESTAMP)


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
            infer_schema_length=10_000,
        )
    else:
        # polars separators are one byte: split each line on the multi-character separator
        if has_header or not names:
            raise PrepError(
                f"Format {fmt.get('name')!r}: the multi-character separator {sep!r} needs "
                "has_header: false and names: [...]."
            )
        line = pl.col("line").str.split(sep)
        lf = (
            pl.scan_csv(
                path, separator="\x1f", has_header=False, new_columns=["line"], quote_char=None
            )
            .select(line.list.get(i, null_on_oob=True).alias(n) for i, n in enumerate(names))
            .with_columns(pl.col(n).str.strip_chars() for n in names)
        )
        lf = _infer_ints(lf, names)
    return _select_canonical(lf, path, fmt)


def _infer_ints(lf: pl.LazyFrame, names: list[str]) -> pl.LazyFrame:
    """Columns split from text are strings; make the all-integer ones Int64 (ids, clocks)."""
    head = lf.head(1000).collect()
    ints = [
        n
        for n in names
        if head[n].cast(pl.Int64, strict=False).null_count() == head[n].null_count()
    ]
    return lf.with_columns(pl.col(n).cast(pl.Int64) for n in ints)


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
        infer_schema_length=10_000,
    )
    names = lf.collect_schema().names() if _readable(lf, path, fmt) else []
    if {"eventdate", "timeframe"} <= set(names):
        lf = lf.with_columns((day.dt.epoch("ms") + pl.col("timeframe")).alias("_clock"))
    return _select_canonical(lf, path, fmt)


def _readable(lf: pl.LazyFrame, path: Path, fmt: Mapping[str, Any]) -> bool:
    try:
        lf.collect_schema()
    except Exception as err:  # polars raises several error types for unreadable files
        raise PrepError(f"Could not read {path} as format {fmt.get('name')!r}: {err}") from None
    return True


@register("parquet")
def read_parquet(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Parquet file. Options: ``columns``, ``timestamp_format``."""
    return _select_canonical(pl.scan_parquet(path), path, fmt)


@register("jsonl")
def read_jsonl(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Newline-delimited JSON (one object per line). Options: ``columns``, ``timestamp_format``."""
    return _select_canonical(pl.scan_ndjson(path), path, fmt)


@register("user_lines")
def read_user_lines(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """One user per line: ``user item item ...`` (S3-Rec style), items in time order.

    The timestamp is the item's position in the line. Options: ``separator`` (default space).
    """
    sep = fmt.get("separator", " ")
    tokens = pl.col("line").str.strip_chars().str.split(sep)
    lf = (
        pl.scan_csv(path, separator="\x1f", has_header=False, new_columns=["line"], quote_char=None)
        .filter(pl.col("line").str.strip_chars() != "")
        .select(
            tokens.list.first().alias(schema.RAW_USER),
            tokens.list.slice(1).alias(schema.RAW_ITEM),
        )
        .with_columns(
            pl.int_ranges(pl.col(schema.RAW_ITEM).list.len(), dtype=pl.Int64).alias(
                schema.RAW_TIMESTAMP
            )
        )
        .explode([schema.RAW_ITEM, schema.RAW_TIMESTAMP])
    )
    lf = _infer_ints(lf, [schema.RAW_USER, schema.RAW_ITEM])
    mapping = {c: c for c in (schema.RAW_USER, schema.RAW_ITEM, schema.RAW_TIMESTAMP)}
    return _select_canonical(lf, path, {**fmt, "columns": mapping})
