"""Readers of item tables (``items=<file>``): the file as a LazyFrame of its columns, values as
the file holds them, each row numbered (``ROW``, 0-based) so that a check can name its line.

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from data_prep.lines import INFER_ROWS, text_fields
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
    return ITEM_READERS[fmt["reader"]](path, fmt).with_row_index(ROW)


def read_delimited(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Delimited text (``.gz`` allowed), every column as text. Options: ``separator`` (several
    characters allowed, e.g. ``::``, with ``names``), ``has_header``, ``names``,
    ``quote_char``, ``encoding``. A blank line is a row of nulls, as in the log's reader."""
    source = _utf8(path, fmt.get("encoding", "utf-8"))
    separator = fmt.get("separator", ",")
    names = list(fmt["names"]) if fmt.get("names") else None
    has_header = bool(fmt.get("has_header", True))
    if len(separator) == 1:
        return pl.scan_csv(
            source,
            separator=separator,
            has_header=has_header,
            new_columns=names,
            quote_char=fmt.get("quote_char", '"'),
            infer_schema=False,
        )
    if has_header or not names:
        raise PrepError(
            f"items_format {fmt.get('name')!r}: the multi-character separator {separator!r} "
            "needs has_header: false and names: [...]."
        )
    return text_fields(source, fmt)


def read_parquet(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Parquet, columns of their own types."""
    return pl.scan_parquet(path)


def read_jsonl(path: Path, fmt: Mapping[str, Any]) -> pl.LazyFrame:
    """Newline-delimited JSON (one object per item), values of their JSON types."""
    return pl.scan_ndjson(path, infer_schema_length=INFER_ROWS)


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
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        return io.BytesIO(data.decode(encoding).encode("utf-8"))
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise PrepError(
            f"{path}, line {line}: bytes that are not {encoding} text (at byte {err.start}); "
            "set items_format.encoding to the file's encoding."
        ) from None
