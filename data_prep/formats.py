"""Readers: map a raw file of some format to a LazyFrame with the canonical raw columns.

A *format* is a small mapping (one ``conf/format/<name>.yaml`` each) whose ``reader`` key names
a reader function registered here; the rest are that reader's options. :func:`scan` returns a
LazyFrame with the canonical columns of :mod:`data_prep.schema`::

    user_id   item_id   timestamp   [event_type]   [category]   [rating]

Two layers, so that a check can still see what the file holds:

* a *reader* renames the mapped source columns to the canonical names, values as in the file
  (:func:`scan_source`);
* :func:`scan` then makes the values canonical: ``user_id`` and ``item_id`` by the id policy of
  :mod:`data_prep.ids` (``" 14"``, ``"014"`` and ``14.0`` are the item 14); ``timestamp`` an
  Int64 in the format's ``timestamp_unit`` (s by default): numbers as they are, dates,
  datetimes and date strings (ISO 8601, offsets such as ``Z`` or ``+02:00`` converted to UTC,
  naive times taken as UTC; or ``timestamp_format``) as epoch values. A value that is present
  but unusable (``yesterday``, the float id 1.5) becomes null, and
  :func:`data_prep.checks.check_values` reports it with its line; a column whose type cannot
  hold ids or times (booleans, lists, structs) is refused at once. ``rating`` keeps its source
  type: only the ``min_rating`` filter reads it (see :func:`data_prep.steps.rating`).

Formats without a clock (``timestamp: null`` in the mapping) get the file's row order, which
is the documented order of files like SASRec's ``user item`` lists. Readers build a plan and
never collect. Before a reader runs, :mod:`data_prep.checks` sniffs the file's head (missing,
empty, binary, wrong separator, wrong field count) so that those errors name the file and line
instead of surfacing as a parser error.

Adding a format: write a function ``(path, fmt) -> LazyFrame`` decorated with
``@register("name")`` that ends with ``_select_mapped`` (or reuse ``csv`` with options), and
add ``conf/format/<name>.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from data_prep import schema
from data_prep.errors import UserError

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
INFER_ROWS = 10_000  # rows that decide a text column's type (csv, jsonl)


class PrepError(UserError):
    """A prep user error (bad path, column, option or empty result)."""


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
        PrepError: the file does not exist, the reader is unknown, a mapped column is missing,
            or the ids or timestamps are of a type that holds none (booleans, lists, ...).
    """
    from data_prep.checks import check_file

    fmt = load_format(fmt)
    path = Path(path)
    if fmt.get("timestamp_unit", "s") not in TIME_UNITS:
        raise PrepError(
            f"format.timestamp_unit must be one of {', '.join(TIME_UNITS)}, "
            f"not {fmt.get('timestamp_unit')!r}."
        )
    reader = _reader(fmt)
    check_file(path, fmt)
    return _canonical(reader(path, fmt), path, fmt)


def scan_source(path: str | Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """The mapped columns of ``path`` with their values as in the file (not canonical): what
    a check reads to say why a canonical value is missing (e.g. the float id 1.5)."""
    return _reader(fmt)(Path(path), fmt)


def _reader(fmt: Mapping[str, Any]) -> Reader:
    reader = READERS.get(fmt.get("reader", "csv"))
    if reader is None:
        raise PrepError(
            f"Format {fmt.get('name')!r} names reader {fmt.get('reader')!r}, which does not "
            f"exist; readers: {', '.join(sorted(READERS))}."
        )
    return reader


def has_clock(fmt: Mapping[str, Any]) -> bool:
    """Whether the format maps a real clock (else the timestamp is the file's row order)."""
    return (
        fmt.get("reader") not in ("user_lines",)
        and (fmt.get("columns") or {}).get(schema.RAW_TIMESTAMP, schema.RAW_TIMESTAMP) is not None
    )


def source_column(fmt: Mapping[str, Any], canonical: str) -> str:
    """The file's column mapped to ``canonical`` (for messages)."""
    return (fmt.get("columns") or {}).get(canonical) or canonical


def _schema(lf: pl.LazyFrame, path: Path, fmt: Mapping[str, Any]) -> pl.Schema:
    """The frame's schema; a file the reader cannot parse becomes a PrepError naming the line
    where that can be found (JSON lines whose values do not fit one type, say)."""
    from data_prep.checks import parse_error

    try:
        return lf.collect_schema()
    except Exception as err:  # polars raises several error types for unreadable files
        raise parse_error(err, path, fmt) from None


def _select_mapped(lf: pl.LazyFrame, path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Rename mapped source columns to canonical names; check they exist; add a row clock.
    Values keep their source types: :func:`scan` makes them canonical."""
    mapping = {k: v for k, v in (fmt.get("columns") or {}).items() if v is not None}
    unknown = set(mapping) - set(CANONICAL)
    if unknown:
        raise PrepError(
            f"Format {fmt.get('name')!r} maps unknown canonical column(s) {sorted(unknown)}; "
            f"the canonical columns are {', '.join(CANONICAL)}."
        )
    available = _schema(lf, path, fmt).names()
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


def _canonical(lf: pl.LazyFrame, path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Ids by the policy of :mod:`data_prep.ids`, the timestamp as Int64 epoch values.

    Values that are present but unusable become null here and are reported by
    :func:`data_prep.checks.check_values` with their line; a column whose type holds no ids
    or times at all is refused now.
    """
    from data_prep import ids

    types = _schema(lf, path, fmt)
    out = lf.with_columns(_timestamp(lf, types[schema.RAW_TIMESTAMP], path, fmt))
    for canonical in REQUIRED:
        try:
            out = ids.canonical(out, canonical, types[canonical])
        except TypeError:
            what = "user" if canonical == schema.RAW_USER else "item"
            raise _wrong_type(
                lf, path, fmt, canonical, f"the {what} id", "ids are integers or text"
            ) from None
    return out


def _wrong_type(
    lf: pl.LazyFrame, path: Path, fmt: Mapping[str, Any], canonical: str, what: str, rule: str
) -> PrepError:
    """A column whose type cannot mean ``what``, naming its first value and where it is (or,
    when the file cannot even be read that far, the line where reading fails)."""
    from data_prep.checks import parse_error, where

    col = pl.col(canonical)
    seen = ""
    try:
        first = lf.with_row_index(ROW).filter(col.is_not_null()).select(ROW, col).head(1).collect()
    except pl.exceptions.PolarsError as err:
        return parse_error(err, path, fmt)
    if first.height:
        value = first[canonical].to_list()[0]
        seen = f"; {where(first[ROW].item(), path, fmt)} holds {value!r}"
    dtype = lf.collect_schema()[canonical]
    return PrepError(
        f"{path}: {what} (column {source_column(fmt, canonical)!r}) holds {dtype} values, "
        f"and {rule}{seen}. Check format.columns.{canonical}."
    )


def _timestamp(lf: pl.LazyFrame, dtype: pl.DataType, path: Path, fmt: Mapping[str, Any]) -> pl.Expr:
    """Timestamp as Int64 in ``timestamp_unit``: integers stay, floats truncate, dates and
    datetimes (naive ones are UTC) and strings (:func:`time_text`) become epoch values."""
    ts = pl.col(schema.RAW_TIMESTAMP)
    unit = fmt.get("timestamp_unit", "s")
    if dtype.is_integer():
        pass
    elif dtype.is_float() or isinstance(dtype, pl.Decimal):
        ts = ts.cast(pl.Float64).floor()
    elif dtype == pl.Date:
        ts = ts.cast(pl.Datetime("ms")).dt.epoch(unit)
    elif isinstance(dtype, pl.Datetime):
        ts = ts.dt.epoch(unit)
    elif isinstance(dtype, (pl.String, pl.Categorical, pl.Enum, pl.Null)):
        ts = time_text(ts.cast(pl.String), unit, fmt.get("timestamp_format"))
    else:
        raise _wrong_type(
            lf,
            path,
            fmt,
            schema.RAW_TIMESTAMP,
            "the timestamp",
            "timestamps are numbers, dates, datetimes or date strings",
        )
    return ts.cast(pl.Int64, strict=False).alias(schema.RAW_TIMESTAMP)


ISO_WITH_OFFSET = "%Y-%m-%dT%H:%M:%S%.f%#z"  # Z, +02:00, +0200 or +02
ISO_NAIVE = "%Y-%m-%dT%H:%M:%S%.f"


def time_text(text: pl.Expr, unit: str, timestamp_format: str | None = None) -> pl.Expr:
    """Epoch values (Int64, ``unit``) of time strings; null where a string is not a time.

    A number is a clock value already (``1511544070``; a fraction is truncated). Otherwise,
    with ``timestamp_format`` (strftime), that format; without it ISO 8601: a date
    (``2017-11-25``) or a date and time (``T`` or a space between, seconds and fraction
    optional), with an offset (``Z``, ``+02:00``) converted to UTC, without one taken as UTC.
    """
    text = text.str.strip_chars()
    number = pl.coalesce(
        text.cast(pl.Int64, strict=False),
        text.cast(pl.Float64, strict=False).floor().cast(pl.Int64, strict=False),
    )
    precision = "ns" if unit == "ns" else "us"
    if timestamp_format:
        parsed = text.str.to_datetime(timestamp_format, strict=False, time_unit=precision)
        return pl.coalesce(number, parsed.dt.epoch(unit))
    iso = text.str.replace(r"^(\d{4}-\d{2}-\d{2}) (\d)", "${1}T${2}").str.replace(
        r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2})([^:]|$)", "${1}:00${2}"
    )
    return pl.coalesce(
        number,
        iso.str.to_datetime(ISO_WITH_OFFSET, strict=False, time_unit=precision).dt.epoch(unit),
        iso.str.to_datetime(ISO_NAIVE, strict=False, time_unit=precision).dt.epoch(unit),
        iso.str.to_date("%Y-%m-%d", strict=False).cast(pl.Datetime("ms")).dt.epoch(unit),
    )


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
    else:
        # polars separators are one byte: split each line on the multi-character separator
        if has_header or not names:
            raise PrepError(
                f"Format {fmt.get('name')!r}: the multi-character separator {sep!r} needs "
                "has_header: false and names: [...]."
            )
        lf = _infer_ints(text_fields(path, fmt), names)
    return _select_mapped(lf, path, fmt)


def text_fields(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """For the readers that split lines themselves (a multi-character separator, one user per
    line): the fields as stripped text, in the reader's row order, before integer columns
    are recognised (the check that names a line whose field is not an integer reads these)."""
    lines = pl.scan_csv(
        path, separator="\x1f", has_header=False, new_columns=["line"], quote_char=None
    )
    if fmt.get("reader") == "user_lines":
        tokens = pl.col("line").str.strip_chars().str.split(fmt.get("separator", " "))
        return (
            lines.filter(pl.col("line").str.strip_chars() != "")
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
    names = list(fmt["names"])
    fields = pl.col("line").str.split(fmt["separator"])
    return lines.select(
        fields.list.get(i, null_on_oob=True).str.strip_chars().alias(n) for i, n in enumerate(names)
    )


def _infer_ints(lf: pl.LazyFrame, names: list[str]) -> pl.LazyFrame:
    """Columns split from text are strings; make the all-integer ones Int64 (ids, clocks).

    Decided on the first rows; a later value that is not an integer fails the read, and
    :func:`data_prep.checks.parse_error` names its line."""
    return lf.with_columns(pl.col(n).cast(pl.Int64) for n in int_columns(lf, names))


def int_columns(lf: pl.LazyFrame, names: list[str]) -> list[str]:
    """The text columns whose first 1,000 values are all integers (or missing)."""
    head = lf.head(1000).collect()
    return [
        n
        for n in names
        if head[n].cast(pl.Int64, strict=False).null_count() == head[n].null_count()
    ]


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
    if {"eventdate", "timeframe"} <= set(_schema(lf, path, fmt).names()):
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
