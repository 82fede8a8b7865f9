"""Readers of item tables (``items=<file>``): the file as a LazyFrame of its columns, values as
the file holds them, one row per record (blank lines too), so that a row number names a line.

An item format's ``reader`` key names a function of the fixed table :data:`ITEM_READERS`
(nothing a file or an option names is imported or called); the rest of the format mapping
are that reader's options, the same keys as the log's readers take
(:mod:`data_prep.readers`). Delimited text is read with every column as text: what a column
means is the item format's to say (:mod:`data_prep.item_table` parses each by its kind), and a
type inferred from the first rows would fail on a later row with a parser message instead of
a line. Parquet and JSON lines keep their own types.

Before it is read, the file is sniffed as a log is (:func:`data_prep.sniff.check_file`:
missing, empty, binary, no such separator, wrong field count), the messages naming
``items_format``. An ``encoding`` other than UTF-8 (MovieLens' movies.dat and u.item are
latin-1) is decoded once, whole, into UTF-8 in memory: Polars reads UTF-8 only, and an item
table is small.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from data_prep.lines import (
    INFER_ROWS,
    check_header,
    file_lines,
    first_misfit,
    nonblank,
    records,
    text_fields,
    where,
)
from data_prep.prep_error import PrepError
from data_prep.schema import ROW
from data_prep.sniff import ITEM_TABLE, check_file

ItemReader = Callable[[Path, Mapping[str, Any]], pl.LazyFrame]


def scan_items(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Plan the read of the item table ``path`` in the (checked) item format ``fmt``.

    Raises:
        PrepError: the file is missing, empty, binary, not in its encoding or not laid out as
            the format says (separator, field count).
    """
    check_file(path, fmt, ITEM_TABLE)
    return ITEM_READERS[fmt["reader"]](path, fmt)


def read_delimited(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Delimited text (``.gz`` allowed), every column as text. Options: ``separator`` (several
    characters allowed, e.g. ``::``, with ``names``), ``has_header``, ``names``,
    ``quote_char``, ``encoding``. A blank line is a row of nulls, as in the log's reader.
    Every record must have as many fields as the header or ``names``: a parser fills a short
    row's last columns with nulls, and a split line's fields would shift, without a word."""
    source = _utf8(path, fmt.get("encoding", "utf-8"))
    separator = fmt.get("separator", ",")
    names = list(fmt["names"]) if fmt.get("names") else None
    has_header = bool(fmt.get("has_header", True))
    if len(separator) > 1 and (has_header or not names):
        raise PrepError(
            f"items_format {fmt.get('name')!r}: the multi-character separator {separator!r} "
            "needs has_header: false and names: [...]."
        )
    quote = fmt.get("quote_char", '"') if len(separator) == 1 else None
    _check_field_counts(source, path, separator, quote, has_header, names)
    if len(separator) > 1:
        return text_fields(source, fmt)
    lf = pl.scan_csv(
        source,
        separator=separator,
        has_header=has_header,
        new_columns=names,
        quote_char=quote,
        infer_schema=False,
    )
    check_header(lf, path)
    return lf


def table_line(row: int, path: Path, fmt: Mapping[str, Any]) -> str:
    """:func:`data_prep.lines.where` for an item table: a delimited table's row is its record,
    which quoted newlines may spread over several lines."""
    separator = fmt.get("separator", ",")
    if fmt["reader"] != "csv" or len(separator) > 1:
        return where(row, path, fmt)
    found = records(
        _utf8(path, fmt.get("encoding", "utf-8")), separator, fmt.get("quote_char", '"')
    )
    return f"line {found['line'][row + int(bool(fmt.get('has_header', True)))]}"


def _check_field_counts(
    source: Path | io.BytesIO,
    path: Path,
    separator: str,
    quote: str | None,
    has_header: bool,
    names: list[str] | None,
) -> None:
    misfit = first_misfit(source, separator, quote, has_header, len(names) if names else None)
    if misfit is not None:
        what = f"the format's names {names}" if names else "the header (line 1)"
        raise PrepError(f"{path}, {misfit.describe(separator, what)}")


def read_parquet(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Parquet, columns of their own types."""
    return pl.scan_parquet(path)


def read_jsonl(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Newline-delimited JSON (one object per item), values of their JSON types."""
    return pl.scan_ndjson(path, infer_schema_length=INFER_ROWS)


def json_nested_rows(path: Path, column: str) -> pl.Series | None:
    """None when no line gives ``column`` a JSON array or object; else the rows (``ROW``,
    blank lines skipped as the reader skips them) that seem to, to name one. Where a column
    mixes those with text, the JSON reader turns them into their JSON text, which no check of
    the values alone can tell apart; a decode of each line as text for ``column`` can."""
    lines = file_lines(path).filter(nonblank()).with_row_index(ROW).collect()
    try:
        lines["text"].str.json_decode(pl.Struct({column: pl.String}))
        return None
    except pl.exceptions.ComputeError:
        pass
    # the key followed by [ or {; a nested object's key of that name may match too
    key = re.escape(json.dumps(column))
    return lines.filter(pl.col("text").str.contains(f"{key}\\s*:\\s*[\\[{{]"))[ROW]


ITEM_READERS: dict[str, ItemReader] = {
    "csv": read_delimited,
    "parquet": read_parquet,
    "jsonl": read_jsonl,
}


def _utf8(path: Path, encoding: str) -> Path | io.BytesIO:
    """The file itself when it is UTF-8, else its text decoded (``.gz`` decompressed) and
    encoded as UTF-8 in memory. The sniff has read the head in ``encoding`` already; a byte
    past it that the encoding cannot read is refused naming its line."""
    if codecs.lookup(encoding).name == "utf-8":
        return path
    return io.BytesIO(decoded(path, encoding).encode("utf-8"))


def decoded(path: Path, encoding: str) -> str:
    """The file's text (``.gz`` decompressed), or a :class:`PrepError` naming the line of the
    first bytes that are not ``encoding`` text; also what names the line when the UTF-8
    parser fails past the sniffed head."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if data.startswith(codecs.BOM_UTF8) and codecs.lookup(encoding).name != "utf-8":
        raise PrepError(  # read as latin-1, the mark would join the first id
            f"{path} starts with a UTF-8 byte-order mark: it is UTF-8 text, not {encoding}. "
            "Set items_format.encoding=utf-8."
        )
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise PrepError(
            f"{path}, line {line}: bytes that are not {encoding} text (at byte {err.start}); "
            "set items_format.encoding to the file's encoding."
        ) from None
