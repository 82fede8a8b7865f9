"""Item attributes: the item table's columns as codes of the items the log kept, for
``items.parquet``, and their description for ``meta.json``.

The table (:mod:`data_prep.item_table`) is joined where items.parquet is built, once the job
has numbered the log's items (so on a Dask cluster too it is read once, in the calling
process, and the result is the one-process result). The join is on the canonical id text of
:mod:`data_prep.ids` on both sides::

    table rows of items the log lacks    dropped, counted (meta.json item_table.not_in_log)
    log items without a table row        PAD: code 0, or [] (counted: item_table.without_row)
    no log item in the table             refused (a wrong id column, or another catalogue)

Codes, with 0 = PAD/missing as for the log's side features (``vocab`` lists the values by
code, position 0 ``"<pad>"``, ``size`` counts PAD):

* categorical: codes 1.. by descending number of kept items with the value, ties by value
  (:func:`data_prep.steps.frequency_codes`); a missing value is 0.
* multi: the same codes over each item's distinct values; the list keeps the table's order.
  An item without values (or without a row) has ``[]``: 0 never appears inside a list, so a
  list's length is the item's number of values.
* numeric-bucketed: ``item_buckets`` (B) quantile buckets of the kept items' values (each
  item once). ``edges`` are the distinct ``higher`` quantiles at 1/B, ..., (B-1)/B (values of
  the data) that exceed the smallest value, so every bucket holds at least one item, and B or
  fewer distinct values get a bucket each (ties merge buckets: fewer than B may remain). Code
  ``c`` is the bucket ``[edges[c-2], edges[c-1])``, with ``-inf`` below the first edge and
  ``inf`` above the last: code 1 is below ``edges[0]``, the last code at or above
  ``edges[-1]``; a missing value is 0; ``size = len(edges) + 2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import polars as pl

from data_prep import schema, steps
from data_prep.item_table import KEY, ItemTable
from data_prep.prep_error import PrepError


@dataclass(frozen=True)
class Attached:
    """What :func:`attach` made: items.parquet with the attribute columns, and meta.json's
    ``item_attributes`` and ``item_table`` entries."""

    items: pl.DataFrame
    attributes: dict[str, dict[str, Any]]
    report: dict[str, Any]


def attach(items: pl.DataFrame, table: ItemTable, buckets: int, log: str) -> Attached:
    """Join ``table`` to ``items`` (items.parquet: ``item``, ``original_id``, ...) and code
    its attributes (see the module's docstring).

    Args:
        buckets: the numeric attributes' bucket count (``item_buckets``).
        log: the log's input, for the message when no item joins.
    Raises:
        PrepError: no item of the log is in the table.
    """
    key = pl.col(schema.ORIGINAL_ID).cast(pl.String)
    joined = items.select(schema.ITEM, key.alias(KEY)).join(
        table.frame, on=KEY, how="left", maintain_order="left"
    )
    matched = items.select(key.is_in(table.frame[KEY].implode()).sum()).item()
    if matched == 0:
        raise PrepError(
            f"Item table {table.path} holds none of the {items.height:,} items of {log}: its "
            f"ids look like {_sample(table.frame[KEY])} and the log's like "
            f"{_sample(joined[KEY])}. Check items_format.id (and format.columns.item_id)."
        )
    coded = {name: _code(joined, name, kind, buckets) for name, kind in table.kinds.items()}
    return Attached(
        items=items.with_columns(column for column, _ in coded.values()),
        attributes={name: described for name, (_, described) in coded.items()},
        report={
            "file": str(table.path),
            "format": table.format,
            "sha256": table.sha256,
            "rows": table.rows,
            "matched": matched,
            "not_in_log": table.rows - matched,
            "without_row": items.height - matched,
        },
    )


def _sample(ids: pl.Series) -> str:
    return ", ".join(repr(v) for v in ids.head(3).to_list())


def _code(
    joined: pl.DataFrame, name: str, kind: str, buckets: int
) -> tuple[pl.Series, dict[str, Any]]:
    """The attribute's column of codes (in item order) and its meta.json description."""
    if kind == schema.NUMERIC_BUCKETED:
        return _bucketed(joined[name], buckets)
    values = joined.select(pl.col(name).explode() if kind == schema.MULTI else pl.col(name))
    counts = values.group_by(name).agg(pl.len()).drop_nulls(name)
    codes = steps.frequency_codes(counts, name)
    to_code = {"old": codes[name], "new": codes["code"], "return_dtype": pl.Int64}
    if kind == schema.MULTI:
        code = pl.col(name).list.eval(pl.element().replace_strict(**to_code)).fill_null([])
    else:
        code = pl.col(name).replace_strict(**to_code, default=schema.PAD)
    vocab = codes[name].to_list()
    return joined.select(code)[name], _described(kind, vocab)


def _bucketed(values: pl.Series, buckets: int) -> tuple[pl.Series, dict[str, Any]]:
    present = values.drop_nulls()
    edges: list[float] = []
    if present.len():
        quantiles = (present.quantile(i / buckets, "higher") for i in range(1, buckets))
        edges = sorted({q for q in quantiles if q > present.min()})
    col = pl.col(values.name)
    bucket = pl.sum_horizontal(pl.lit(1, pl.Int64), *((col >= e).cast(pl.Int64) for e in edges))
    code = pl.when(col.is_null()).then(schema.PAD).otherwise(bucket).cast(pl.Int64)
    bounds = [-math.inf, *edges, math.inf]
    labels = [f"[{_exact(lo)}, {_exact(hi)})" for lo, hi in pairwise(bounds)]
    described = {**_described(schema.NUMERIC_BUCKETED, labels), "edges": edges}
    return values.to_frame().select(code.alias(values.name)).to_series(), described


def _exact(edge: float) -> str:
    """An edge as its shortest exact text (1000001, not 1e+06: two buckets never read alike)."""
    if math.isfinite(edge) and edge.is_integer() and abs(edge) < 2**53:
        return str(int(edge))
    return repr(edge)


def _described(kind: str, vocab: list[Any]) -> dict[str, Any]:
    return {"kind": kind, "size": len(vocab) + 1, "vocab": [schema.PAD_TOKEN, *map(str, vocab)]}
