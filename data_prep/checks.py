"""Input checks that turn bad files into one-paragraph errors naming the file and line.

Two layers, because a parser error ("could not parse `x` as dtype i64 at offset 4") tells a
practitioner neither the line nor what to change:

* :func:`check_file` sniffs the first 64 KiB before any reader runs: a missing, empty, binary
  or non-gzip file, a separator that does not occur in the first line while another one does,
  and lines whose field count differs from the header (or the format's ``names``).
* :func:`check_values` runs one streaming aggregate over the whole canonical log (row count,
  missing ids, timestamp range) and, only when something is wrong, a query that finds the first
  offending row, reported as its line (or Parquet row) with the value the file holds there;
  :func:`check_ratings` does the same for the ratings that ``min_rating`` filters on.
* The ``option_*`` functions check the prep options' types and ranges, so that a wrong option
  is one paragraph naming it.

Parser errors that still happen (a JSON line that is not an object, a late value that does not
fit its column's inferred type) go through :func:`parse_error`, which looks for their line.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import numbers
import re
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from data_prep import ids, schema, steps
from data_prep.formats import (
    INFER_ROWS,
    ROW,
    PrepError,
    has_clock,
    int_columns,
    scan_source,
    source_column,
    text_fields,
    time_text,
)

SNIFF_BYTES = 1 << 16
COMMON_SEPARATORS = (",", "\t", ";", "|", "::", " ")
# later than any real behaviour log: 2100-01-01 in each unit; larger values mean a wrong unit
LATEST = {"s": 4_102_444_800, "ms": 4_102_444_800_000, "us": 4_102_444_800 * 10**6}
LATEST["ns"] = 4_102_444_800 * 10**9
TEXT_READERS = ("csv", "user_lines", "jsonl", "diginetica")


def head_bytes(path: Path) -> bytes:
    """The first 64 KiB of the file's content (decompressed for ``.gz``)."""
    with open(path, "rb") as f:
        raw = f.read(SNIFF_BYTES)
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, SNIFF_BYTES)
    except zlib.error as err:
        raise PrepError(
            f"{path} starts like a gzip file but cannot be decompressed ({err})."
        ) from None


def check_file(path: Path, fmt: Mapping[str, Any]) -> None:
    """Raise :class:`PrepError` for a file the format's reader cannot sensibly read."""
    name = fmt.get("name", "?")
    if path.exists() and not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file (a device, pipe or socket)"
        raise PrepError(f"Input {path} is {what}; give the {name} log file itself.")
    if not path.is_file():
        raise PrepError(f"Input file not found: {path} (format {name!r}).")
    if path.stat().st_size == 0:
        raise PrepError(f"Input file {path} is empty (0 bytes); expected a {name} log.")
    head = head_bytes(path)
    reader = fmt.get("reader", "csv")
    if reader == "parquet":
        if not head.startswith(b"PAR1"):
            raise PrepError(f"{path} is not a Parquet file (no PAR1 magic); check format=.")
        return
    if reader not in TEXT_READERS:
        return
    if not head.strip():
        raise PrepError(f"Input file {path} is empty (no text); expected a {name} log.")
    text = _decode(head, path, name)
    complete = len(head) < SNIFF_BYTES
    lines = text.split("\n")
    lines = [ln.rstrip("\r") for ln in (lines if complete else lines[:-1])]
    if reader == "jsonl":
        first = next((ln for ln in lines if ln.strip()), "")
        if not first.lstrip().startswith("{"):
            raise PrepError(
                f"{path}, line 1: expected one JSON object per line (format {name!r}), found "
                f"{first[:60]!r}."
            )
    elif reader in ("csv", "diginetica"):
        _check_fields(lines, path, fmt)


def _decode(head: bytes, path: Path, name: str) -> str:
    if b"\x00" in head:
        raise PrepError(
            f"{path} looks binary (it contains NUL bytes), not a {name} text log; check the "
            "file and format= (Parquet files need format=parquet)."
        )
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start >= len(head) - 3:  # a multi-byte character cut by the sniff window
            return head[: err.start].decode("utf-8")
        line = head[: err.start].count(b"\n") + 1
        raise PrepError(
            f"{path}, line {line}: bytes that are not UTF-8 text (at byte {err.start}); the "
            f"file looks binary or uses another encoding, not a {name} text log."
        ) from None


def _check_fields(lines: list[str], path: Path, fmt: Mapping[str, Any]) -> None:
    """Separator and field count of the sniffed lines against the header or ``names``."""
    sep = fmt.get("separator", ";" if fmt.get("reader") == "diginetica" else ",")
    quote = fmt.get("quote_char", '"')
    lines = [ln for ln in lines if ln.strip()]
    if not lines:
        return
    first = lines[0]
    names = fmt.get("names")
    expected = len(names) if names else len(first.split(sep))
    found = [s for s in COMMON_SEPARATORS if s != sep and s in first]
    if sep not in first and (expected > 1 or found):
        hint = f"; it contains {found[0]!r}: set format.separator={found[0]!r}?" if found else ""
        raise PrepError(
            f"{path}, line 1: no {sep!r} separator (format {fmt.get('name')!r} expects "
            f"{expected} fields separated by {sep!r}){hint} Line 1 reads {first[:80]!r}."
        )
    for number, line in enumerate(lines, start=1):
        if quote and quote in line:
            continue  # quoted fields may hold the separator; leave those lines to the parser
        fields = len(line.split(sep))
        if fields != expected:
            what = f"the format's names {list(names)}" if names else "the header (line 1)"
            raise PrepError(
                f"{path}, line {number}: {fields} fields separated by {sep!r}, but "
                f"{what} has {expected}. Wrong separator, or missing/extra columns? "
                f"Line {number} reads {line[:80]!r}."
            )


def where(row: int, path: Path, fmt: Mapping[str, Any]) -> str:
    """Where raw row ``row`` (0-based, as numbered by the prep job) is in the file: ``line N``
    of a text file (1-based, counting the header and blank lines), ``row N`` (1-based) of a
    Parquet file. Delimited text numbers rows as lines (a blank line is a row of nulls);
    JSON lines and one-user-per-line files skip blank lines, so their line is looked up."""
    reader = fmt.get("reader", "csv")
    if reader in ("csv", "diginetica"):
        header = reader == "diginetica" or bool(fmt.get("has_header", True))
        return f"line {row + 1 + int(header)}"
    if reader in ("jsonl", "user_lines"):
        line = _file_line(row, path, fmt)
        if line is not None:
            return f"line {line}"
    return f"row {row + 1}"


def _lines(path: Path) -> pl.LazyFrame:
    """The file's lines as text (``.gz`` decompressed), numbered from 1; blank lines kept."""
    return pl.scan_csv(
        path,
        separator="\x1f",
        has_header=False,
        new_columns=["text"],
        quote_char=None,
        infer_schema=False,
        truncate_ragged_lines=True,
    ).with_row_index("line", offset=1)


def _nonblank() -> pl.Expr:
    return pl.col("text").str.strip_chars().fill_null("") != ""


def _file_line(row: int, path: Path, fmt: Mapping[str, Any]) -> int | None:
    """The line of row ``row`` in a file whose reader skips blank lines (JSON lines: one row
    per line; one user per line: one row per item)."""
    try:
        lines = _lines(path).filter(_nonblank())
        if fmt.get("reader") == "user_lines":
            tokens = pl.col("text").str.strip_chars().str.split(fmt.get("separator", " "))
            rows_before_next = (tokens.list.len() - 1).cum_sum()  # a line's rows: its items
            found = lines.filter(rows_before_next > row).select("line").head(1).collect()
        else:
            found = lines.with_row_index(ROW).filter(pl.col(ROW) == row).select("line").collect()
    except pl.exceptions.PolarsError:
        return None
    return found.item() if found.height else None


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
        ``rows`` and, for a log with a clock, ``min_time`` / ``max_time``.
    """
    user, item, ts = schema.RAW_USER, schema.RAW_ITEM, schema.RAW_TIMESTAMP
    clock = has_clock(fmt)
    latest = LATEST[fmt.get("timestamp_unit", "s")]
    stats = raw.select(
        pl.len().alias("rows"),
        pl.col(user).null_count().alias("null_user"),
        pl.col(item).null_count().alias("null_item"),
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
    return {k: row[k] for k in ("rows", "min_time", "max_time")} if clock else {"rows": row["rows"]}


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
        rating = steps.rating(dtype)
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


def parse_error(err: Exception, path: Path, fmt: Mapping[str, Any]) -> PrepError:
    """A parser exception as a :class:`PrepError` naming the file (and the line, when found),
    with a hint that fits the format."""
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    reader = fmt.get("reader", "csv")
    if reader == "jsonl":
        located = _locate_json_line(path, fmt)
    elif reader == "user_lines" or (reader == "csv" and len(fmt.get("separator", ",")) > 1):
        located = _locate_text_field(path, fmt)
    else:
        located = _locate_bad_value(path, fmt)
    return PrepError(
        f"Could not read {path} as format {fmt.get('name')!r}: "
        + (located or f"{message}.")
        + " "
        + _HINTS.get(reader, _HINTS["csv"])
    )


_HINTS = {
    "csv": "Check format.separator, format.names and the column mapping.",
    "diginetica": "Check format.separator, format.names and the column mapping.",
    "jsonl": (
        "Each line must be one JSON object, and each key's values of one type (ids all "
        "numbers or all strings; timestamps numbers or date strings); check the column "
        "mapping (format.columns)."
    ),
    "parquet": "Check the file and the column mapping (format.columns).",
    "user_lines": "Each line must be a user id and then item ids, separated by the separator.",
}


def _locate_bad_value(path: Path, fmt: Mapping[str, Any]) -> str | None:
    """For a delimited file: the first line whose mapped column does not fit its column's type
    (inferred from the first rows), found by re-reading the file as text. None if not found."""
    if fmt.get("reader") != "csv" or len(fmt.get("separator", ",")) != 1:
        return None
    kwargs = {
        "separator": fmt.get("separator", ","),
        "has_header": bool(fmt.get("has_header", True)),
        "new_columns": list(fmt["names"]) if fmt.get("names") else None,
        "null_values": fmt.get("null_values"),
        "quote_char": fmt.get("quote_char", '"'),
    }
    try:
        inferred = pl.scan_csv(path, infer_schema_length=INFER_ROWS, **kwargs).collect_schema()
        text = pl.scan_csv(path, infer_schema=False, **kwargs).with_row_index(ROW)
        for col in (fmt.get("columns") or {}).values():
            if col is None or col not in inferred or not inferred[col].is_numeric():
                continue
            cast = pl.col(col).str.strip_chars().cast(inferred[col], strict=False)
            found = _first_uncast(text, col, cast, path, fmt, "a number")
            if found:
                return found
    except pl.exceptions.PolarsError:
        return None
    return None


def _first_uncast(
    text: pl.LazyFrame, col: str, cast: pl.Expr, path: Path, fmt: Mapping[str, Any], kind: str
) -> str | None:
    """Where the first value of ``col`` that ``cast`` turns into null is, as a message."""
    bad = text.filter(cast.is_null() & pl.col(col).is_not_null()).select(ROW, col).head(1)
    bad = bad.collect()
    if not bad.height:
        return None
    return (
        f"{where(bad[ROW].item(), path, fmt)}, column {col!r}: value {bad[col].item()!r} is "
        f"not {kind} like the rows before it."
    )


def _locate_text_field(path: Path, fmt: Mapping[str, Any]) -> str | None:
    """For the readers that split lines themselves: the first line whose field is not an
    integer while the first rows of its column are. None if not found."""
    try:
        text = text_fields(path, fmt)
        names = text.collect_schema().names()
        text = text.with_row_index(ROW)
        for col in int_columns(text, names):
            cast = pl.col(col).cast(pl.Int64, strict=False)
            found = _first_uncast(text, col, cast, path, fmt, "an integer")
            if found:
                return found
    except pl.exceptions.PolarsError:
        return None
    return None


def _locate_json_line(path: Path, fmt: Mapping[str, Any]) -> str | None:
    """The first line of a JSON-lines file that the reader cannot take: the shortest prefix of
    its lines that fails to read as the whole file failed, found by bisection (a few reads
    of prefixes, no loop over lines). None if no prefix fails."""
    sources = [c for c in (fmt.get("columns") or {}).values() if c is not None]
    try:
        lines = _lines(path).filter(_nonblank()).collect()
    except pl.exceptions.PolarsError:
        return None

    def failure(count: int) -> str | None:
        data = lines["text"].head(count).str.join("\n").item().encode()
        try:
            lf = pl.scan_ndjson(io.BytesIO(data), infer_schema_length=INFER_ROWS)
            present = set(lf.collect_schema().names())
            lf.select(c for c in sources if c in present).collect()
        except Exception as err:  # polars raises several error types for unreadable JSON
            return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return None

    message = failure(lines.height)
    if message is None:
        return None
    good, bad = 0, lines.height  # the first `good` lines read, the first `bad` do not
    while bad - good > 1:
        middle = (good + bad) // 2
        found = failure(middle)
        good, bad = (good, middle) if found else (middle, bad)
        message = found or message
    line, text = lines.row(bad - 1)
    return f"line {line}: {message}; line {line} reads {text[:80]!r}."


# ---------------------------------------------------------------------------- option values
# Options come from the command line (Hydra gives ints, floats, bools, strings or lists) or
# from Python; each is checked for type and range here so that a wrong one is a PrepError
# naming it, never a traceback or a silently different job.


def option_int(key: str, value: Any, least: int) -> int:
    """An integer option >= ``least``: an int or a string of one (``"12"``); not a bool, not
    1.5 or 3.0, not a list."""
    integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    digits = isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value)
    number = int(value) if integral or digits else None
    if number is None or number < least:
        raise PrepError(
            f"Option {key} must be >= {least} and a whole number (e.g. {key}={least + 4}), "
            f"got {_shown(value)}."
        )
    return number


def option_number(
    key: str,
    value: Any,
    above: float | None = None,
    below: float | None = None,
    at_least: float | None = None,
) -> int | float:
    """A finite number (an int stays an int) ``> above``, ``< below`` and ``>= at_least``
    where given; a string of one is accepted; not a bool, NaN, inf or a list."""
    number: int | float | None = None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = value if isinstance(value, numbers.Integral) else float(value)
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"[+-]?[0-9]+", text):
            number = int(text)
        else:
            try:
                number = float(text)
            except ValueError:
                number = None
    in_range = (
        number is not None
        and math.isfinite(number)
        and (above is None or number > above)
        and (below is None or number < below)
        and (at_least is None or number >= at_least)
    )
    if not in_range:
        bounds = [
            f"{word} {bound}"
            for word, bound in ((">", above), ("<", below), (">=", at_least))
            if bound is not None
        ]
        raise PrepError(
            f"Option {key} must be a number{' ' + ' and '.join(bounds) if bounds else ''}, "
            f"got {_shown(value)}."
        )
    return number


def option_list(key: str, value: Any, allow_empty: bool = True) -> list[str] | None:
    """A list option of names: a list, or one name given alone (``event_types=buy`` is
    ``['buy']``, never split into characters); None stays None. Names are strings or ints."""
    if value is None:
        return None
    values = [value] if isinstance(value, (str, numbers.Integral)) else value
    if isinstance(value, bool) or not isinstance(values, (list, tuple)):
        raise PrepError(
            f"Option {key} must be a list of names (e.g. {key}=[a,b]) or one name, got "
            f"{_shown(value)}."
        )
    odd = [v for v in values if isinstance(v, bool) or not isinstance(v, (str, numbers.Integral))]
    if odd:
        raise PrepError(
            f"Option {key} must list names (strings or integers), got {_shown(odd[0])} in "
            f"{list(values)!r}; quote a name that looks like another type (e.g. {key}=['true'])."
        )
    if not values and not allow_empty:
        raise PrepError(f"Option {key}=[] would keep nothing; leave it null to keep everything.")
    return [str(v) for v in values]


def option_time(key: str, value: Any, unit: str) -> int | None:
    """A time option as a clock value in the log's ``unit``: an integer (or an integral float)
    is a clock value already; a date or ISO 8601 date-time (a string, or a Python date or
    datetime) is converted, an offset (``Z``, ``+08:00``) to UTC, a naive time taken as UTC,
    exactly as timestamps in the log are (:func:`data_prep.formats.time_text`)."""
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
        raise PrepError(
            f"Option {key} must be a clock value in unit {unit!r} (an integer) or a date or "
            f"date-time (e.g. 2017-12-01, 2017-12-01T08:00:00Z or 2017-12-01T16:00:00+08:00), "
            f"got {_shown(value)}."
        )
    return int(clock)


def option_flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PrepError(f"Option {key} must be true or false, got {_shown(value)}.")
    return value


def _shown(value: Any) -> str:
    """``'abc'``, ``True (a bool)``, ``[1] (a list)``: the value and, when it could be mistaken
    for another type, its type."""
    shown = repr(value)
    if isinstance(value, (bool, list, tuple, dict, float)) or value is None:
        shown += f" (a {type(value).__name__})"
    return shown
