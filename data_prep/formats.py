"""Formats: a format mapping loaded by name, and :func:`scan`, which reads a raw file in that
format as a LazyFrame with the canonical raw columns of :mod:`data_prep.schema`::

    user_id   item_id   timestamp   [event_type]   [category]   [rating]

A *format* is a small mapping (one ``conf/format/<name>.yaml`` each) whose ``reader`` key names
a reader function of :mod:`data_prep.readers`; the rest are that reader's options. Those yaml
files are the format registry (``format=<name>`` on the command line, the name in Python): the
built-in formats exist only there.

Two layers, so that a check can still see what the file holds:

* a *reader* renames the mapped source columns to the canonical names, values as in the file
  (:func:`data_prep.readers.scan_source`);
* :func:`scan` then makes the values canonical: ``user_id`` and ``item_id`` by the id policy of
  :mod:`data_prep.ids` (``" 14"``, ``"014"`` and ``14.0`` are the item 14); ``timestamp`` an
  Int64 in the format's ``timestamp_unit`` (s by default): numbers as they are, dates,
  datetimes and date strings (ISO 8601, offsets such as ``Z`` or ``+02:00`` converted to UTC,
  naive times taken as UTC; or ``timestamp_format``) as epoch values. A value that is present
  but unusable (``yesterday``, the float id 1.5) becomes null, and
  :func:`data_prep.checks.check_values` reports it with its line; a column whose type cannot
  hold ids or times (booleans, lists, structs) is refused at once. ``rating`` keeps its source
  type: only the ``min_rating`` filter reads it (see :func:`data_prep.steps.numbers`).

Before a reader runs, :mod:`data_prep.sniff` checks the file's head (missing, empty, binary,
wrong separator, wrong field count) so that those errors name the file and line instead of
surfacing as a parser error.
"""

from __future__ import annotations

import datetime as dt
import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl
from omegaconf import OmegaConf

from data_prep import ids, schema
from data_prep.lines import parse_error, where
from data_prep.prep_error import PrepError
from data_prep.readers import READERS as READERS  # re-exported: tests look readers up here
from data_prep.readers import REQUIRED, read_schema, reader_for
from data_prep.schema import ROW
from data_prep.sniff import check_file
from recsys_seq.core.conf import CONF_DIR
from recsys_seq.core.option_checks import shown
from recsys_seq.core.options import OptionError

FORMAT_DIR = CONF_DIR / "format"
TIME_UNITS = ("s", "ms", "us", "ns")


def load_format(
    fmt: str | Mapping[str, Any], folder: Path = FORMAT_DIR, option: str = "format"
) -> dict[str, Any]:
    """Return a format mapping: given as a mapping, or by name from ``<folder>/<name>.yaml``,
    ``conf/format`` for logs (the built-in ones, the default ``csv`` included, are defined
    there only), ``conf/items_format`` for item tables (:mod:`data_prep.item_formats`).

    Args:
        option: the option that names it, for the message that refuses an unknown name.
    """
    if not isinstance(fmt, str):
        return dict(fmt)
    path = folder / f"{fmt}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.yaml"))
        raise PrepError(f"Unknown {option} {fmt!r}: no {path}. Known: {', '.join(known)}.")
    return dict(OmegaConf.to_container(OmegaConf.load(path), resolve=True))


def scan(path: str | Path, fmt: str | Mapping[str, Any]) -> pl.LazyFrame:
    """Plan the read of ``path`` in format ``fmt``: canonical columns, nothing collected.

    Raises:
        PrepError: the file does not exist, the reader is unknown, a mapped column is missing,
            or the ids or timestamps are of a type that holds none (booleans, lists, ...).
    """
    fmt = load_format(fmt)
    path = Path(path)
    if fmt.get("timestamp_unit", "s") not in TIME_UNITS:
        raise PrepError(
            f"format.timestamp_unit must be one of {', '.join(TIME_UNITS)}, "
            f"not {fmt.get('timestamp_unit')!r}."
        )
    reader = reader_for(fmt)
    check_file(path, fmt)
    return _canonical(reader(path, fmt), path, fmt)


def has_clock(fmt: Mapping[str, Any]) -> bool:
    """Whether the format maps a real clock (else the timestamp is the file's row order)."""
    return (
        fmt.get("reader") not in ("user_lines",)
        and (fmt.get("columns") or {}).get(schema.RAW_TIMESTAMP, schema.RAW_TIMESTAMP) is not None
    )


def source_column(fmt: Mapping[str, Any], canonical: str) -> str:
    """The file's column mapped to ``canonical`` (for messages)."""
    return (fmt.get("columns") or {}).get(canonical) or canonical


def _canonical(lf: pl.LazyFrame, path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Ids by the policy of :mod:`data_prep.ids`, the timestamp as Int64 epoch values.

    Values that are present but unusable become null here and are reported by
    :func:`data_prep.checks.check_values` with their line; a column whose type holds no ids
    or times at all is refused now.
    """
    types = read_schema(lf, path, fmt)
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


def option_time(key: str, value: Any, unit: str) -> int | None:
    """A time option as a clock value in the log's ``unit``: an integer (or an integral float)
    is a clock value already; a date or ISO 8601 date-time (a string, or a Python date or
    datetime) is converted, an offset (``Z``, ``+08:00``) to UTC, a naive time taken as UTC,
    exactly as timestamps in the log are (:func:`time_text`)."""
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    text = value.isoformat() if isinstance(value, (dt.date, dt.datetime)) else value
    clock = None
    if isinstance(text, str):
        clock = pl.select(time_text(pl.lit(text, dtype=pl.String), unit)).item()
    if clock is None:
        raise OptionError(
            f"Option {key} must be a clock value in unit {unit!r} (an integer) or a date or "
            f"date-time (e.g. 2017-12-01, 2017-12-01T08:00:00Z or 2017-12-01T16:00:00+08:00), "
            f"got {shown(value)}."
        )
    return int(clock)
