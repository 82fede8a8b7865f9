"""The id policy: when two raw values are the same user or item.

Logs write one id in many ways (``14``, ``" 14"``, ``"014"``, ``14.0`` from a pandas export
with a missing value in the column), and a recommender that keeps two items for one product,
or one user for two people, is silently wrong. So :func:`data_prep.formats.scan` applies
:func:`canonical` to the user and item columns of every format, and :func:`canonical_series` /
:func:`read_id_list` apply the same rules to ids given later (a users file for
``recsys-recommend``)::

    raw value (column type)                 canonical id
    14, 0014 (integer column)               14             integer columns are canonical
    "14", " 14 ", "014", "+14", "14.0"      "14"           an integer written in decimal
    "-007", "1000.", "1000.00"              "-7", "1000"   ... becomes its plain decimal text
    "abc ", "A-1", "1.5", "1e3"             "abc", "A-1", "1.5", "1e3"   kept after stripping
    1000.0 (float column)                   1000           integral floats become the integer
    1.5, inf, 1e300 (float column)          refused        a wrong column mapping, or an id a
                                                           float cannot hold (beyond 2^53)
    null, "", "  ", NaN                     missing        null_ids=error refuses the row,
                                                           null_ids=drop drops it
    booleans, dates, lists, structs         refused        not ids: check format.columns

Ids are compared as text after canonicalisation: surrounding whitespace is stripped; a text
id that is an integer written in decimal (optional sign, leading zeros, or an integral
fraction ``.0``/``.00``) becomes that integer's plain decimal text; every other text is kept
verbatim (case, inner spaces and all). The integer ``14`` and the text ``"14"`` are the same id,
so an integer column keeps its integer dtype (the fast path of sorting and joins) and the
original ids stored in ``items.parquet`` / ``users.parquet`` are the canonical ones.

The rules are Polars expressions (no Python loop over rows); the checks that refuse a value
name the column and row (:mod:`data_prep.checks`).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from data_prep.prep_error import PrepError

# a decimal integer, with optional sign, leading zeros and an all-zero fraction (ASCII digits
# only: ``\d`` would also match other scripts' digits, which are text ids)
DECIMAL_INTEGER = r"^([+-]?)0*([0-9]+?)(?:\.0*)?$"
# floats hold every integer exactly only up to 2**53; a larger float id may not be the id
# that was written (two ids can collapse into one)
EXACT_FLOAT_LIMIT = 2**53
# a first line naming the column of an id list, not an id
HEADER_NAMES = ("user_id", "user", "id", "userid", "original_id")
TEXT_TYPES = (pl.String, pl.Categorical, pl.Enum, pl.Null)


def kind(dtype: pl.DataType) -> str | None:
    """How the policy reads a column of ``dtype``: ``integer``, ``float``, ``text``, or None
    for a type that holds no ids (booleans, dates, lists, structs, binary, decimals)."""
    if dtype.is_integer():
        return "integer"
    if dtype.is_float():
        return "float"
    if isinstance(dtype, TEXT_TYPES) or dtype in TEXT_TYPES:
        return "text"
    return None


def canonical(lf: pl.LazyFrame, column: str, dtype: pl.DataType) -> pl.LazyFrame:
    """``lf`` with ``column`` (of ``dtype``) replaced by its canonical ids, missing ids null.

    Integers stay as they are; floats become Int64 (NaN and the values :func:`invalid` flags
    become null, so check those first); text becomes canonical text (:func:`canonical_text`).

    Raises:
        TypeError: ``dtype`` holds no ids (see :func:`kind`); the caller names the column.
    """
    how = kind(dtype)
    if how == "integer":
        return lf
    col = pl.col(column)
    if how == "float":
        return lf.with_columns(pl.when(~invalid(col, dtype)).then(col.cast(pl.Int64, strict=False)))
    if how == "text":
        return canonical_text(lf, column)
    raise TypeError(f"a {dtype} column holds no ids")


def invalid(expr: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """True where a value is present but cannot be an id: a float that is infinite, not
    integral, or beyond what a float holds exactly. NaN is missing, not invalid."""
    if kind(dtype) != "float":
        return pl.lit(False)
    return expr.is_not_nan() & (
        expr.is_infinite() | (expr != expr.floor()) | (expr.abs() > EXACT_FLOAT_LIMIT)
    )


def canonical_text(lf: pl.LazyFrame, column: str) -> pl.LazyFrame:
    """Text ids: stripped; a decimal integer as its plain decimal text; empty as null.

    Built in stages of plain columns: Polars does not share the sub-expressions of one
    expression, and the nested form ran the regex four times (about 3x slower)."""
    text, digits = f"_{column}_text", f"_{column}_digits"
    number = (
        pl.when(pl.col(text).str.starts_with("-") & (pl.col(digits) != "0"))
        .then("-" + pl.col(digits))
        .otherwise(pl.col(digits))
    )
    return (
        lf.with_columns(pl.col(column).cast(pl.String).str.strip_chars().alias(text))
        .with_columns(pl.col(text).str.extract(DECIMAL_INTEGER, 2).alias(digits))
        .with_columns(
            pl.when(pl.col(text) != "").then(pl.coalesce(number, pl.col(text))).alias(column)
        )
        .drop(text, digits)
    )


def canonical_series(ids: pl.Series) -> pl.Series:
    """Canonical ids of a Series as text (e.g. the original ids of ``users.parquet``, to
    compare with :func:`read_id_list`); missing ids are null.

    Raises:
        PrepError: the Series holds no ids, or floats that cannot be ids.
    """
    how = kind(ids.dtype)
    if how is None:
        raise PrepError(f"ids {ids.name!r} are of type {ids.dtype}, not integers or text.")
    frame = ids.to_frame("id")
    bad = frame.filter(invalid(pl.col("id"), ids.dtype))
    if bad.height:
        raise PrepError(
            f"ids {ids.name!r} hold {bad.height:,} float(s) that are not integer ids, such as "
            f"{bad['id'][0]!r}."
        )
    canonical_ids = canonical(frame.lazy(), "id", ids.dtype).select(pl.col("id").cast(pl.String))
    return canonical_ids.collect()["id"].rename(ids.name)


def read_id_list(path: str | Path, what: str = "user") -> list[str]:
    """The canonical ids listed in a text file, in file order, each once.

    One id per line, or a csv whose first column holds them (quoted ids like ``"14"`` are
    unquoted); a UTF-8 byte-order mark, CRLF line ends and blank lines are fine; a first line
    that names the column (one of :data:`HEADER_NAMES`, any case) is a header, not an id.

    Args:
        what: the kind of id, for messages (``user``, ``item``).
    Raises:
        PrepError: the file is missing, a directory, binary or not UTF-8 text (naming the
            line), not readable as csv, or lists no ids.
    """
    path = Path(path)
    if path.is_dir():
        raise PrepError(f"{path} is a directory; give a file with one {what} id per line.")
    if path.exists() and not path.is_file():
        raise PrepError(
            f"{what.capitalize()} id file {path} is not a regular file (a device, pipe or "
            f"socket); give a text file with one {what} id per line."
        )
    if not path.is_file():
        raise PrepError(f"{what.capitalize()} id file {path} does not exist.")
    data = path.read_bytes()
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise PrepError(
            f"{path}, line {line}: the file looks binary (it contains NUL bytes); give a text "
            f"file with one {what} id per line."
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise PrepError(
            f"{path}, line {line}: bytes that are not UTF-8 text (at byte {err.start}); save "
            f"the {what} id list as UTF-8 text, one id per line."
        ) from None
    try:
        first = pl.read_csv(
            text.encode(),
            has_header=False,
            columns=[0],
            infer_schema=False,
            truncate_ragged_lines=True,
        ).to_series(0)
    except pl.exceptions.NoDataError:
        first = pl.Series("id", [], dtype=pl.String)
    except pl.exceptions.PolarsError as err:
        message = str(err).strip().splitlines()[0]
        raise PrepError(
            f"Could not read {path} as a list of {what} ids ({message}); give one id per line "
            "or a csv whose first column holds them."
        ) from None
    ids = canonical_text(first.rename("id").to_frame().lazy(), "id").collect()["id"].drop_nulls()
    if ids.len() and ids[0].lower() in HEADER_NAMES:
        ids = ids.slice(1)
    if ids.len() == 0:
        raise PrepError(f"{path} lists no {what} ids; give one id per line.")
    return ids.unique(maintain_order=True).to_list()
