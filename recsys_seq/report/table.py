"""The runs as one table (``report.csv``: every metric) and its markdown (key metrics only).

The key metrics follow what the runs optimised: the test value of each run's optimised metric
and HR at the same cut-off (those the bar plot shows), each run's best validation value of
its own optimised metric (``val/best_<name>``, in one column ``best_val``), and the
beyond-accuracy metrics at the same cut-off (coverage, avg_pop, gini, tail_share of the top-K
lists), so a gain in accuracy bought with the same few popular items shows beside it.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from recsys_seq.core import tables
from recsys_seq.core.tables import Column
from recsys_seq.optimized_metric import BEYOND_ACCURACY, best_key, cutoff
from recsys_seq.report.runs import Run, key_metrics

RUN_COLUMNS = ("run", "model", "dataset", "overrides", "optimized_metric", "debug")
TRAILING = ("fit/epochs", "fit/seconds")


def table(runs: Sequence[Run]) -> pl.DataFrame:
    """One row per run: folder, model, dataset, overrides, optimised metric, why it is a debug
    run (empty for a real one), its best validation value, then every metric (sorted keys)."""
    keys = sorted({k for r in runs for k, v in r.metrics.items() if isinstance(v, int | float)})
    rows = [
        {
            "run": r.name,
            "model": r.model,
            "dataset": r.dataset,
            "overrides": " ".join(r.overrides),
            "optimized_metric": r.metric,
            "debug": r.debug,
            "best_val": _number(r.metrics.get(best_key(r.metric))),
            **{k: _number(r.metrics.get(k)) for k in keys},
            "checkpoint": r.metrics.get("checkpoint"),
        }
        for r in runs
    ]
    schema_ = {c: pl.String for c in RUN_COLUMNS} | {"best_val": pl.Float64}
    schema_ |= {k: pl.Float64 for k in keys} | {"checkpoint": pl.String}
    return pl.DataFrame(rows, schema=schema_)


def markdown(frame: pl.DataFrame) -> str:
    """The key columns of :func:`table` as a markdown pipe table: the test metrics the runs
    optimised (and HR at the same cut-off), each run's optimised metric and best validation
    value, popularity's test values, the first test metric as a multiple of popularity's, the
    beyond-accuracy test metrics at the optimised cut-offs, and the training time."""
    optimized = frame["optimized_metric"].unique(maintain_order=True).to_list()
    tests = key_metrics(optimized)
    lead, baseline = tests[0], f"popularity/{tests[0]}"
    ratio = f"{lead} vs popularity"
    if {lead, baseline} <= set(frame.columns):
        frame = frame.with_columns((pl.col(lead) / pl.col(baseline)).alias(ratio))
    shown = [*tests, "optimized_metric", "best_val", *(f"popularity/{m}" for m in tests), ratio]
    shown += [*beyond_accuracy_metrics(optimized), *TRAILING, "debug"]
    columns = ["run", "model", "dataset", "overrides"]
    columns += [c for c in shown if c in frame.columns and frame[c].null_count() < frame.height]
    rows = [
        [_cell(name, value) for name, value in zip(columns, row, strict=True)]
        for row in frame.select(columns).iter_rows()
    ]
    heads = [Column(c, right=frame.schema[c] == pl.Float64) for c in columns]
    return tables.markdown(heads, rows)


def beyond_accuracy_metrics(optimized: Sequence[str]) -> list[str]:
    """``test/<coverage|avg_pop|gini|tail_share>@<k>`` at the cut-offs of the ``optimized``
    validation metrics."""
    ks = dict.fromkeys(cutoff(m) for m in optimized if "@" in m)
    return [f"test/{name}@{k}" for k in ks for name in BEYOND_ACCURACY]


def _cell(column: str, value: object) -> str:
    if value is None or value == "":
        return "-"
    if column == "fit/epochs":
        return f"{value:.0f}"
    if column == "fit/seconds":
        return f"{value:,.1f}"
    if column.endswith(" vs popularity"):
        return f"{value:.2f}x"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
