"""The prep job's input: one log file, or a log in many files as clusters keep them.

``input=`` names a file, a folder or a glob pattern::

    input=clicks.csv.gz                  one file
    input=/shared/logs/clicks/           every file under the folder, sub-folders included
                                         (Hive-style ``day=2024-01-01/part-0.parquet`` too)
    input='/shared/logs/part-*.csv'      the files the pattern matches (``**`` crosses folders)

The files of one log are read in the order of their paths, so the log's row order, which
breaks ties between events of one user at one timestamp, is that order and then each file's
own. Names starting with ``.`` or ``_`` (``_SUCCESS``, ``.crc`` files, ``_temporary/``) are
engine bookkeeping, not data, and are skipped, and so are empty (0-byte) files, which hold no
events. All files share the format of ``format=``; where they disagree on a column's type
(integer ids in one part, text ids in another), :func:`unify` reads that column as text, which
is how the id policy (:mod:`data_prep.ids`) compares ids anyway.
"""

from __future__ import annotations

import glob
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from data_prep.formats import has_clock, scan
from data_prep.prep_error import PrepError
from data_prep.schema import RAW_TIMESTAMP

GLOB_CHARACTERS = frozenset("*?[")


def is_pattern(spec: str) -> bool:
    return bool(GLOB_CHARACTERS & set(spec))


def log_files(spec: str) -> list[Path]:
    """The files of the log that ``input=spec`` names, in read order.

    A plain path is returned as it is (a missing or odd file is refused later, by the reader's
    file check, with the format in the message); a folder or pattern must yield files.
    """
    path = Path(spec)
    if is_pattern(spec):
        found = [Path(p) for p in glob.glob(spec, recursive=True)]
        where = f"the pattern {spec!r}"
    elif path.is_dir():
        found = [p for p in path.rglob("*") if not _hidden(p.relative_to(path))]
        where = f"the folder {path}"
    else:
        return [path]
    files = sorted(p for p in found if p.is_file() and not _hidden(p) and p.stat().st_size)
    if not files:
        raise PrepError(
            f"No input files in {where} (names starting with '.' or '_' and empty files are "
            "skipped); check input=."
        )
    return files


def _hidden(path: Path) -> bool:
    return any(part.startswith((".", "_")) for part in path.parts if part not in (".", ".."))


def read_folders(spec: str) -> list[Path]:
    """Folders the job reads from as a whole (an output may not lie inside one)."""
    return [Path(spec)] if not is_pattern(spec) and Path(spec).is_dir() else []


def file_sha256(path: Path) -> str:
    """The file's content hash, read in 1 MiB chunks (a log's part, an item table)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def combined_sha256(file_hashes: Sequence[str]) -> str:
    """The log's content hash: a single file's own hash, else the hash of the files' hashes
    in read order (renaming or moving the parts does not change it; reordering them does,
    as it changes the row order)."""
    if len(file_hashes) == 1:
        return file_hashes[0]
    return hashlib.sha256("\n".join(file_hashes).encode()).hexdigest()


def unify(schemas: Sequence[Mapping[str, pl.DataType]]) -> dict[str, pl.DataType]:
    """One schema for the files' canonical columns: a type the files agree on stays; integers
    of several widths become one that holds them all (Int64, or UInt64 when all are
    unsigned), never a float, which would round 64-bit ids (an Int32 part beside an Int64
    one); integers beside floats become Float64, as the float parts already are; any other
    disagreement becomes text. A column that only some files have is null in the others.
    Columns in the first file's order, then new ones.
    """
    columns: dict[str, list[pl.DataType]] = {}
    for schema in schemas:
        for name, dtype in schema.items():
            columns.setdefault(name, []).append(dtype)
    unified = {}
    for name, dtypes in columns.items():
        kinds = {d for d in dtypes if d != pl.Null} or {pl.Null}
        if len(kinds) == 1:
            unified[name] = kinds.pop()
        elif all(d.is_integer() for d in kinds):
            unified[name] = _widest_integer(kinds)
        elif all(d.is_numeric() for d in kinds) and pl.UInt64 not in kinds:
            unified[name] = pl.Float64
        else:
            unified[name] = pl.String
    return unified


def _widest_integer(kinds: set[pl.DataType]) -> pl.DataType:
    """Int64 holds every integer type but UInt64; UInt64 holds only the unsigned ones; a
    signed column beside a UInt64 one is read as text (each id keeps its digits)."""
    if pl.UInt64 not in kinds:
        return pl.Int64
    return pl.UInt64 if all(d.is_unsigned_integer() for d in kinds) else pl.String


@dataclass(frozen=True)
class LogFile:
    """One file of the log and where its rows sit in the whole log's row order."""

    path: Path
    first_row: int  # the log's row number of this file's first row
    schema: Mapping[str, pl.DataType]  # the log's unified canonical columns (see unify)

    def scan(self, fmt: Mapping[str, Any]) -> pl.LazyFrame:
        """The file's canonical columns, cast to the log's schema (none cast for one file).

        Without a clock the timestamp is the row order, counted in the whole log's."""
        frame = scan(self.path, fmt)
        present = frame.collect_schema()
        columns = [
            (pl.col(name) if name in present else pl.lit(None)).cast(dtype).alias(name)
            if present.get(name) != dtype
            else pl.col(name)
            for name, dtype in self.schema.items()
        ]
        frame = frame.select(columns)
        if not has_clock(fmt) and self.first_row:
            frame = frame.with_columns(pl.col(RAW_TIMESTAMP) + self.first_row)
        return frame
