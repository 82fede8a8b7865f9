"""Input checks that turn bad files into one-paragraph errors naming the file and line.

Two layers, because a parser error ("could not parse `x` as dtype i64 at offset 4") tells a
practitioner neither the line nor what to change:

* :func:`check_file` sniffs the first 64 KiB before any reader runs: a missing, empty, binary
  or non-gzip file, a separator that does not occur in the first line while another one does,
  and lines whose field count differs from the header (or the format's ``names``).
* :func:`check_values` runs one streaming aggregate over the whole mapped log (row count, null
  ids, timestamp range) and, only when something is wrong, a second query that finds the first
  offending row, reported as a line number.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from data_prep import schema
from data_prep.formats import ROW, PrepError, has_clock

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


def line_of(row: int, fmt: Mapping[str, Any]) -> str:
    """Where raw row ``row`` (0-based, as numbered by the prep job) is in the file."""
    if fmt.get("reader") in ("csv", "diginetica"):
        header = fmt.get("has_header", True) or fmt.get("reader") == "diginetica"
        return f"line {row + 1 + int(bool(header))}"
    if fmt.get("reader") == "jsonl":
        return f"line {row + 1}"
    return f"record {row + 1}"


def check_values(
    raw: pl.LazyFrame, path: Path, fmt: Mapping[str, Any], drop_null_ids: bool
) -> dict[str, int]:
    """Profile the mapped log (rows, nulls, time range) and raise on the first bad value.

    Args:
        raw: the reader's output with the row number column ``ROW``.
        drop_null_ids: null ids are dropped later (``null_ids=drop``) instead of an error.
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
    problems = []
    if not drop_null_ids:
        problems += [
            (pl.col(user).is_null(), f"the user id (column {_source(fmt, user)!r}) is missing"),
            (pl.col(item).is_null(), f"the item id (column {_source(fmt, item)!r}) is missing"),
        ]
    if clock:
        col = _source(fmt, ts)
        unit = fmt.get("timestamp_unit", "s")
        problems += [
            (
                pl.col(ts).is_null(),
                f"the timestamp (column {col!r}) is missing or not a number/date",
            ),
            (pl.col(ts) < 0, f"the timestamp (column {col!r}) is negative"),
            (
                pl.col(ts) > latest,
                f"the timestamp (column {col!r}) is after the year 2100 in unit {unit!r} "
                "(milliseconds read as seconds? set format.timestamp_unit=ms)",
            ),
        ]
    needs_look = (
        (not drop_null_ids and (row["null_user"] or row["null_item"]))
        or (clock and row["null_ts"])
        or (clock and row["min_time"] is not None and row["min_time"] < 0)
        or (clock and row["max_time"] is not None and row["max_time"] > latest)
    )
    if needs_look:
        for condition, message in problems:
            bad = _collect(raw.filter(condition).select(ROW).head(1), path, fmt)
            if bad.height:
                count = _collect(raw.filter(condition).select(pl.len()), path, fmt).item()
                raise PrepError(
                    f"{path}, {line_of(bad.item(), fmt)}: {message} ({count:,} such rows). "
                    + ("Use null_ids=drop to skip rows without ids." if "id" in message else "")
                )
    return {k: row[k] for k in ("rows", "min_time", "max_time")} if clock else {"rows": row["rows"]}


def _source(fmt: Mapping[str, Any], canonical: str) -> str:
    return (fmt.get("columns") or {}).get(canonical) or canonical


def _collect(lf: pl.LazyFrame, path: Path, fmt: Mapping[str, Any]) -> pl.DataFrame:
    try:
        return lf.collect(engine="streaming")
    except pl.exceptions.PolarsError as err:
        raise parse_error(err, path, fmt) from None


def parse_error(err: Exception, path: Path, fmt: Mapping[str, Any]) -> PrepError:
    """A parser exception as a :class:`PrepError` naming the file (and the line, when found)."""
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    located = _locate_bad_value(path, fmt)
    return PrepError(
        f"Could not read {path} as format {fmt.get('name')!r}: "
        + (located or message)
        + " Check format.separator, format.names and the column mapping."
    )


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
        inferred = pl.scan_csv(path, infer_schema_length=10_000, **kwargs).collect_schema()
        text = pl.scan_csv(path, infer_schema=False, **kwargs).with_row_index(ROW)
        for col in (fmt.get("columns") or {}).values():
            if col is None or col not in inferred or not inferred[col].is_numeric():
                continue
            cast = pl.col(col).str.strip_chars().cast(inferred[col], strict=False)
            bad = (
                text.filter(cast.is_null() & pl.col(col).is_not_null())
                .select(ROW, col)
                .head(1)
                .collect()
            )
            if bad.height:
                where = line_of(bad[ROW].item(), fmt)
                return (
                    f"{where}, column {col!r}: value {bad[col].item()!r} is not a number like the "
                    "rows before it."
                )
    except pl.exceptions.PolarsError:
        return None
    return None
