"""The raw file's head sniffed before any reader runs, so that a file no reader can sensibly
read is refused naming the file and line instead of surfacing as a parser error.

:func:`check_file` reads the first 64 KiB (decompressed for ``.gz``) and refuses a missing,
empty, binary or non-gzip file, a Parquet file without its magic, a JSON-lines file whose first
line is no object, a separator that does not occur in the first line while another one does,
and lines whose field count differs from the header (or the format's ``names``). What only a
full read finds (a late value that does not fit its column) is located afterwards by
:mod:`data_prep.lines`; this module reads a format mapping's keys only, below the readers.
The same checks guard an item table (``items=``, :mod:`data_prep.item_readers`), whose
messages name its own option (:data:`ITEM_TABLE`) and whose format may set an ``encoding``.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from data_prep.prep_error import PrepError

SNIFF_BYTES = 1 << 16
COMMON_SEPARATORS = (",", "\t", ";", "|", "::", " ")
TEXT_READERS = ("csv", "user_lines", "jsonl", "diginetica")


class Role(NamedTuple):
    """What the sniffed file is to the job, for the messages: the option that names its format
    and what kind of file it is."""

    option: str
    kind: str


LOG = Role("format", "log")
ITEM_TABLE = Role("items_format", "item table")  # items=<file> (:mod:`data_prep.item_readers`)


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


def check_file(path: Path, fmt: Mapping[str, Any], role: Role = LOG) -> None:
    """Raise :class:`PrepError` for a file the format's reader cannot sensibly read."""
    name = fmt.get("name", "?")
    if path.exists() and not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file (a device, pipe or socket)"
        raise PrepError(f"Input {path} is {what}; give the {name} {role.kind} file itself.")
    if not path.is_file():
        raise PrepError(f"Input file not found: {path} ({role.option} {name!r}).")
    if path.stat().st_size == 0:
        raise PrepError(f"Input file {path} is empty (0 bytes); expected a {name} {role.kind}.")
    head = head_bytes(path)
    reader = fmt.get("reader", "csv")
    if reader == "parquet":
        if not head.startswith(b"PAR1"):
            raise PrepError(f"{path} is not a Parquet file (no PAR1 magic); check {role.option}=.")
        return
    if reader not in TEXT_READERS:
        return
    if not head.strip():
        raise PrepError(f"Input file {path} is empty (no text); expected a {name} {role.kind}.")
    text = _decode(head, path, fmt, role)
    complete = len(head) < SNIFF_BYTES
    lines = text.split("\n")
    lines = [ln.rstrip("\r") for ln in (lines if complete else lines[:-1])]
    if reader == "jsonl":
        first = next((ln for ln in lines if ln.strip()), "")
        if first.startswith("\ufeff"):  # the JSON reader reads none
            raise PrepError(
                f"{path} starts with a UTF-8 byte-order mark, which JSON lines may not hold "
                f"({role.option} {name!r}); save the file without it."
            )
        if not first.lstrip().startswith("{"):
            raise PrepError(
                f"{path}, line 1: expected one JSON object per line ({role.option} {name!r}), "
                f"found {first[:60]!r}."
            )
    elif reader in ("csv", "diginetica"):
        _check_fields(lines, path, fmt, role)


def _decode(head: bytes, path: Path, fmt: Mapping[str, Any], role: Role) -> str:
    """The head as text in the format's ``encoding`` (UTF-8 but for item tables such as
    MovieLens' latin-1 movies.dat, see :mod:`data_prep.item_readers`)."""
    name, encoding = fmt.get("name", "?"), fmt.get("encoding", "UTF-8")
    if b"\x00" in head:
        raise PrepError(
            f"{path} looks binary (it contains NUL bytes), not a {name} text {role.kind}; "
            f"check the file and {role.option}= (Parquet files need {role.option}=parquet)."
        )
    try:
        return head.decode(encoding)
    except UnicodeDecodeError as err:
        if err.start >= len(head) - 3:  # a multi-byte character cut by the sniff window
            return head[: err.start].decode(encoding)
        line = head[: err.start].count(b"\n") + 1
        raise PrepError(
            f"{path}, line {line}: bytes that are not {encoding} text (at byte {err.start}); the "
            f"file looks binary or uses another encoding, not a {name} text {role.kind}."
        ) from None


def _check_fields(lines: list[str], path: Path, fmt: Mapping[str, Any], role: Role) -> None:
    """Separator and field count of the sniffed lines against the header or ``names``."""
    sep = fmt.get("separator", ";" if fmt.get("reader") == "diginetica" else ",")
    quote = fmt.get("quote_char", '"')
    numbered = [(number, ln) for number, ln in enumerate(lines, start=1) if ln.strip()]
    if not numbered:
        return
    first = numbered[0][1]
    names = fmt.get("names")
    expected = len(names) if names else len(first.split(sep))
    found = [s for s in COMMON_SEPARATORS if s != sep and s in first]
    if sep not in first and (expected > 1 or found):
        hint = ""
        if found:
            hint = f"; it contains {found[0]!r}: set {role.option}.separator={found[0]!r}?"
        raise PrepError(
            f"{path}, line {numbered[0][0]}: no {sep!r} separator ({role.option} "
            f"{fmt.get('name')!r} expects {expected} fields separated by {sep!r}){hint} Line "
            f"{numbered[0][0]} reads {first[:80]!r}."
        )
    inside = False  # within a quoted value that spans lines
    for number, line in numbered:
        continued, quoted = inside, bool(quote) and quote in line
        inside ^= bool(quote) and line.count(quote) % 2 == 1
        if continued or quoted:
            continue  # quoted values may hold separators and newlines: counted in full later
        fields = len(line.split(sep))
        if fields != expected:
            what = f"the format's names {list(names)}" if names else "the header (line 1)"
            raise PrepError(
                f"{path}, line {number}: {fields} fields separated by {sep!r}, but "
                f"{what} has {expected}. Wrong separator, or missing/extra columns? "
                f"Line {number} reads {line[:80]!r}."
            )
