"""The raw file as text, below the readers: its lines split into fields, and a row or a parser
failure located as the file's line.

A parser error ("could not parse `x` as dtype i64 at offset 4") tells a practitioner neither
the line nor what to change, so:

* :func:`where` turns a raw row number (``ROW``) into the file's line (or Parquet row).
* :func:`parse_error` turns a parser exception that sniffing the file's head
  (:mod:`data_prep.sniff`) could not foresee (a JSON line that is not an object, a late value
  that does not fit its column's inferred type) into a :class:`PrepError` naming the line,
  found by re-reading the file as text the way the reader did (:func:`text_fields`,
  :func:`int_columns`, ``INFER_ROWS``).

The readers (:mod:`data_prep.readers`) and the value checks (:mod:`data_prep.checks`) both
use these, which is why they sit below both; they read a format mapping's keys only.
"""

from __future__ import annotations

import codecs
import gzip
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from data_prep import schema
from data_prep.prep_error import PrepError
from data_prep.schema import ROW

INFER_ROWS = 10_000  # rows that decide a text column's type (csv, jsonl): readers and locators
# what a locator's re-read of a file that failed may raise in turn: it then finds no line
LOCATE_ERRORS = (pl.exceptions.PolarsError, OSError)


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


def file_lines(path: Path | io.BytesIO) -> pl.LazyFrame:
    """The file's lines as ``text`` (``.gz`` decompressed), numbered from 1 (``line``); blank
    lines kept (null)."""
    return pl.scan_csv(
        path,
        separator="\x1f",
        has_header=False,
        new_columns=["text"],
        quote_char=None,
        infer_schema=False,
        truncate_ragged_lines=True,
    ).with_row_index("line", offset=1)


def records(source: Path | io.BytesIO, separator: str, quote: str | None) -> pl.DataFrame:
    """The file's records as the parser finds them, header included: ``line`` (the first line
    of each), ``text`` and its number of ``fields``. A line inside an open quote continues
    the record before it, and separators inside quotes split nothing."""
    lines = file_lines(source)
    text = pl.col("text").fill_null("")
    if quote:
        quotes = text.str.count_matches(quote, literal=True)
        continues = (quotes.cum_sum() - quotes) % 2 == 1  # an odd count of quotes before it
        lines = (
            lines.with_columns((~continues).cum_sum().alias("record"))
            .group_by("record", maintain_order=True)
            .agg(pl.col("line").first(), text.str.join("\n"))
        )
    found = lines.select("line", text, _fields(text, separator, quote)).collect()
    if isinstance(source, io.BytesIO):
        source.seek(0)
    return found


@dataclass(frozen=True)
class Misfit:
    """A record whose field count is not the header's (or the names')."""

    line: int
    text: str
    fields: int
    expected: int
    count: int  # such records in the file

    def describe(self, separator: str, what: str) -> str:
        more = f" ({self.count:,} such records)" if self.count > 1 else ""
        return (
            f"line {self.line}: {self.fields} fields separated by {separator!r}, but {what} has "
            f"{self.expected}{more}. A missing or extra field, or a separator inside an "
            f"unquoted value? Line {self.line} reads {self.text[:80]!r}."
        )


def first_misfit(
    source: Path | io.BytesIO,
    separator: str,
    quote: str | None,
    has_header: bool,
    expected: int | None,
) -> Misfit | None:
    """The first non-blank record (after the header) whose field count is not ``expected``
    (None: the header's), counting as the parser does: a parser pads a short record's last
    columns with nulls, and a split line's fields shift, without a word. A file without a
    quoted newline is checked line by line in one streaming pass; one with quoted newlines
    is grouped into records in memory (:func:`records`)."""
    lines = file_lines(source)
    text = pl.col("text").fill_null("")
    quotes = text.str.count_matches(quote, literal=True) if quote else pl.lit(0)
    spread = quote and lines.filter(quotes % 2 == 1).head(1).collect(engine="streaming").height
    if isinstance(source, io.BytesIO):
        source.seek(0)
    if spread:
        counted = records(source, separator, quote).lazy()
    else:
        counted = lines.select("line", text, _fields(text, separator, quote))
    present = nonblank()
    if expected is None:  # the header's, or the first record's
        head = counted.filter(present).head(1).collect()
        if head.height == 0:
            return None
        expected = head["fields"][0]
    wrong = counted.filter(
        (pl.col("line") > int(has_header)) & present & (pl.col("fields") != expected)
    )
    found = wrong.select(
        pl.first("line"), pl.first("text"), pl.first("fields"), pl.len().alias("count")
    ).collect(engine="streaming")
    if isinstance(source, io.BytesIO):
        source.seek(0)
    if found["count"][0] == 0:
        return None
    line, text_read, fields, count = found.row(0)
    return Misfit(line, text_read, fields, expected, count)


def _fields(text: pl.Expr, separator: str, quote: str | None) -> pl.Expr:
    """The number of fields of a record's ``text``: separators outside quotes, plus one."""
    if quote:
        q = re.escape(quote)
        text = text.str.replace_all(f"{q}(?:[^{q}]|{q}{q})*{q}", "")
    return (text.str.count_matches(separator, literal=True) + 1).alias("fields")


def check_header(lf: pl.LazyFrame, path: Path) -> None:
    """Refuse a header that names a column twice (the parser would rename the second)."""
    found = lf.collect_schema().names()
    repeated = [
        name for name in found if (base := DUPLICATE.sub("", name)) != name and base in found
    ]
    if repeated:
        raise PrepError(
            f"{path}, line 1: the header names the column "
            f"{DUPLICATE.sub('', repeated[0])!r} twice; give each column its own name."
        )


DUPLICATE = re.compile(r"_duplicated_\d+$")  # the parser's name for a header's repeat


def nonblank() -> pl.Expr:
    return pl.col("text").str.strip_chars().fill_null("") != ""


def _file_line(row: int, path: Path, fmt: Mapping[str, Any]) -> int | None:
    """The line of row ``row`` in a file whose reader skips blank lines (JSON lines: one row
    per line; one user per line: one row per item)."""
    try:
        lines = file_lines(path).filter(nonblank())
        if fmt.get("reader") == "user_lines":
            tokens = pl.col("text").str.strip_chars().str.split(fmt.get("separator", " "))
            rows_before_next = (tokens.list.len() - 1).cum_sum()  # a line's rows: its items
            found = lines.filter(rows_before_next > row).select("line").head(1).collect()
        else:
            found = lines.with_row_index(ROW).filter(pl.col(ROW) == row).select("line").collect()
    except LOCATE_ERRORS:
        return None
    return found.item() if found.height else None


def text_fields(path: Path | io.BytesIO, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """For the readers that split lines themselves (a multi-character separator, one user per
    line): the fields as stripped text, in the reader's row order, before integer columns
    are recognised (the check that names a line whose field is not an integer reads these).
    ``path`` may be the file's text already in memory (an item table transcoded to UTF-8)."""
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


def int_columns(lf: pl.LazyFrame, names: list[str]) -> list[str]:
    """The text columns whose first 1,000 values are all integers (or missing)."""
    head = lf.head(1000).collect()
    return [
        n
        for n in names
        if head[n].cast(pl.Int64, strict=False).null_count() == head[n].null_count()
    ]


def parse_error(err: BaseException, path: Path, fmt: Mapping[str, Any]) -> PrepError:
    """A parser exception as a :class:`PrepError` naming the file (and the line, when found),
    with a hint that fits the format; an ``OSError`` (bytes that cannot be read at all, such as
    a gzip stream that ends early) names the file and says it is damaged."""
    message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if isinstance(err, OSError):  # the bytes, not their parse: no line, no format hint
        return PrepError(
            f"Could not read {path}: {message}. The file is incomplete or damaged (a gzip "
            "file cut short, a copy that did not finish, a storage error); copy it again."
        )
    reader = fmt.get("reader", "csv")
    if "utf-8" in message.lower() and reader != "parquet":
        located = _locate_bad_utf8(path)
    elif reader == "jsonl":
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


def _locate_bad_utf8(path: Path) -> str | None:
    """Where the first bytes that are not UTF-8 text are, read in blocks (a log may be larger
    than memory); None if the file decodes."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with open(path, "rb") as head:
        opener = gzip.open if head.read(2) == b"\x1f\x8b" else open
    lines_before = 0
    with opener(path, "rb") as file:
        while block := file.read(1 << 20):
            try:
                decoder.decode(block)
            except UnicodeDecodeError as err:
                line = lines_before + block[: max(err.start, 0)].count(b"\n") + 1
                return f"line {line}: bytes that are not UTF-8 text. Convert the file to UTF-8."
            lines_before += block.count(b"\n")
    return None


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
        casts = {
            col: pl.col(col).str.strip_chars().cast(inferred[col], strict=False)
            for col in (fmt.get("columns") or {}).values()
            if col is not None and col in inferred and inferred[col].is_numeric()
        }
        return _first_uncast(text, casts, path, fmt, "a number")
    except LOCATE_ERRORS:
        return None


def _first_uncast(
    text: pl.LazyFrame,
    casts: Mapping[str, pl.Expr],
    path: Path,
    fmt: Mapping[str, Any],
    kind: str,
) -> str | None:
    """Where the first value that its column's cast (``casts``, column by column in order)
    turns into null is, as a message; None when every value casts."""
    for col, cast in casts.items():
        bad = text.filter(cast.is_null() & pl.col(col).is_not_null()).select(ROW, col).head(1)
        bad = bad.collect()
        if bad.height:
            return (
                f"{where(bad[ROW].item(), path, fmt)}, column {col!r}: value "
                f"{bad[col].item()!r} is not {kind} like the rows before it."
            )
    return None


def _locate_text_field(path: Path, fmt: Mapping[str, Any]) -> str | None:
    """For the readers that split lines themselves: the first line whose field is not an
    integer while the first rows of its column are. None if not found."""
    try:
        text = text_fields(path, fmt)
        names = text.collect_schema().names()
        text = text.with_row_index(ROW)
        casts = {col: pl.col(col).cast(pl.Int64, strict=False) for col in int_columns(text, names)}
        return _first_uncast(text, casts, path, fmt, "an integer")
    except LOCATE_ERRORS:
        return None


def _locate_json_line(path: Path, fmt: Mapping[str, Any]) -> str | None:
    """The first line of a JSON-lines file that the reader cannot take: the shortest prefix of
    its lines that fails to read as the whole file failed, found by bisection (a few reads
    of prefixes, no loop over lines). None if no prefix fails."""
    sources = [c for c in (fmt.get("columns") or {}).values() if c is not None]
    try:
        lines = file_lines(path).filter(nonblank()).collect()
    except LOCATE_ERRORS:
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
