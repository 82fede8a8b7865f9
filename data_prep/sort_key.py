"""The packed sort key of :func:`data_prep.steps.order_and_dedup`: one Int64 whose order is the
(user, timestamp) order.

Sorting by ``[key, ROW]`` gives the same order as ``[USER, TS, ROW]``, faster (see
:func:`user_time_key`). The key needs the value ranges of the sort columns, known only for
an in-memory part (:func:`sort_bounds`), so it is an optional speed-up kept out of the steps:
without bounds, or when the ranges do not fit in 63 bits together, the step sorts by columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from data_prep import schema

USER, TS = schema.RAW_USER, schema.RAW_TIMESTAMP
WIDE_INTEGERS = (pl.Int64, pl.UInt64, pl.Int128, pl.UInt128)  # 64 bits or wider


def sort_bounds(frame: pl.DataFrame) -> dict[str, Any] | None:
    """Value ranges of the sort columns of an in-memory part, for :func:`user_time_key`
    (None for non-integer user ids or timestamps, or nulls among them)."""
    schema_ = frame.schema
    if frame.height == 0 or not (schema_[USER].is_integer() and schema_[TS].is_integer()):
        return None
    row = frame.select(
        pl.col(USER).min().alias("user_min"),
        pl.col(USER).max().alias("user_max"),
        pl.col(TS).min().alias("ts_min"),
        pl.col(TS).max().alias("ts_max"),
        (pl.col(USER).null_count() + pl.col(TS).null_count()).alias("nulls"),
    ).row(0, named=True)
    if row.pop("nulls") or any(v is None for v in row.values()):
        return None
    return {**row, f"{USER}_dtype": schema_[USER], f"{TS}_dtype": schema_[TS]}


def user_time_key(bounds: Mapping[str, Any]) -> pl.Expr | None:
    """One Int64 whose order is the (user, timestamp) order: ``(user - min) << b | (ts - min)``
    when both ranges fit in 63 bits together, else None.

    Sorting by ``[key, ROW]`` gives the same order as ``[USER, TS, ROW]`` but about twice as
    fast: the leading user column has long runs of ties that the multi-column sort resolves
    by comparing the next columns; the packed key has almost none.
    """
    user_bits = int(bounds["user_max"] - bounds["user_min"]).bit_length()
    ts_bits = int(bounds["ts_max"] - bounds["ts_min"]).bit_length()
    if user_bits + ts_bits > 63:
        return None
    return _from(USER, bounds["user_min"], bounds) * (1 << ts_bits) + _from(
        TS, bounds["ts_min"], bounds
    )


def _from(column: str, low: int, bounds: Mapping[str, Any]) -> pl.Expr:
    """``column - low`` as Int64, exact for ids of any integer type: the difference is taken
    in a type that holds both (the column's own from 64 bits up, where ``low`` is its minimum,
    else Int64: ``127 - -128`` is no Int8) and fits in Int64 (the range fits in 63 bits)."""
    dtype = bounds[f"{column}_dtype"]
    wide = dtype if dtype in WIDE_INTEGERS else pl.Int64
    return (pl.col(column).cast(wide) - pl.lit(low, wide)).cast(pl.Int64)
