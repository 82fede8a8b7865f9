"""The id policy of :mod:`data_prep.ids` for ids given as Python values (the Python API's
histories), where no column type says what a value is: each value is read by its own type.

    value (Python type)                     read as
    14, np.int64(14)                        "14"            an integer
    14.0, np.float32(14)                    "14"            an integral float
    " 014", "A-1"                           "14", "A-1"     text, canonical (:func:`canonical_text`)
    1.5, inf, 1e300                         refused         a float that is not an integer id
    None, NaN, "", "  "                     refused         a missing id
    True, np.bool_, dates, lists, bytes     refused         not ids

A refused value raises :class:`IdValueError` naming the value and where it is. Types are
read once per distinct type and the values converted by Polars, not in a Python loop per value.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np
import polars as pl

from data_prep.ids import canonical, invalid
from recsys_seq.core.errors import UserError

REFUSED, MISSING, INTEGER, FLOAT, TEXT = range(-1, 4)
DTYPES = {INTEGER: None, FLOAT: pl.Float64, TEXT: pl.String}  # None: Int64, or wider if need be


class IdValueError(UserError, ValueError):
    """A value that the id policy refuses (a user error, and a ValueError for Python code)."""


def value_kind(kind: type) -> int:
    """How the policy reads a value of type ``kind``. ``bool`` is an ``int`` subclass and
    ``np.bool_`` converts to one, so both are refused before the numbers are looked at."""
    if issubclass(kind, (bool, np.bool_)):
        return REFUSED
    if kind is type(None):
        return MISSING
    if issubclass(kind, (int, np.integer)):
        return INTEGER
    if issubclass(kind, (float, np.floating)):
        return FLOAT
    return TEXT if issubclass(kind, str) else REFUSED


def canonical_values(
    histories: Sequence[Sequence], what: str = "item"
) -> tuple[np.ndarray, pl.Series]:
    """``(lengths, ids)``: each history's length and the canonical ids of all its values,
    flat in order, as text.

    Raises:
        IdValueError: a value the policy refuses, named with its place (``histories[q][p]``).
    """
    lengths = np.fromiter(map(len, histories), dtype=np.int64, count=len(histories))
    values = np.fromiter(chain.from_iterable(histories), dtype=object, count=int(lengths.sum()))
    types = list(map(type, values))
    kinds = {kind: value_kind(kind) for kind in set(types)}
    codes = np.fromiter(map(kinds.__getitem__, types), dtype=np.int8, count=len(types))
    _refuse(codes == REFUSED, values, lengths, what, "not an id")
    text = np.full(len(values), None, dtype=object)
    for code, dtype in DTYPES.items():
        chosen = np.flatnonzero(codes == code)
        if len(chosen):
            typed = pl.Series("id", values[chosen].tolist(), dtype=dtype, strict=False)
            bad = np.zeros(len(values), dtype=bool)
            bad[chosen] = typed.to_frame().select(invalid(pl.col("id"), typed.dtype)).to_series()
            _refuse(bad, values, lengths, what, "a float that is not an integer id")
            converted = canonical(typed.to_frame().lazy(), "id", typed.dtype)
            text[chosen] = converted.select(pl.col("id").cast(pl.String)).collect()["id"].to_list()
    ids = pl.Series("id", text.tolist(), dtype=pl.String)
    _refuse(ids.is_null().to_numpy(), values, lengths, what, "a missing id (drop it)")
    return lengths, ids


def _refuse(
    wrong: np.ndarray, values: np.ndarray, lengths: np.ndarray, what: str, why: str
) -> None:
    """Raise for the first ``wrong`` value, naming it and its place, and how many more."""
    flagged = np.flatnonzero(wrong)
    if not len(flagged):
        return
    first = int(flagged[0])
    query = int(np.searchsorted(np.cumsum(lengths), first, side="right"))
    position = first - int(lengths[:query].sum())
    value = values[first]
    more = f" ({len(flagged) - 1} more such value(s))" if len(flagged) > 1 else ""
    raise IdValueError(
        f"histories[{query}][{position}] = {value!r} ({type(value).__name__}) is {why}{more}; "
        f"give each {what} id as an integer or text."
    )
