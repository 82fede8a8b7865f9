"""The runs as one table (``report.csv``: every metric) and its markdown (key metrics only)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from recsys_seq.report.runs import Run

TABLE_METRICS = (
    "test/ndcg@10",
    "test/hr@10",
    "test/mrr@10",
    "popularity/test/ndcg@10",
    "popularity/test/hr@10",
    "fit/epochs",
    "fit/seconds",
)


def table(runs: Sequence[Run]) -> pl.DataFrame:
    """One row per run: folder, model, dataset, overrides, then every metric (sorted keys)."""
    keys = sorted({k for r in runs for k, v in r.metrics.items() if isinstance(v, int | float)})
    rows = [
        {
            "run": r.name,
            "model": r.model,
            "dataset": r.dataset,
            "overrides": " ".join(r.overrides),
            **{k: float(r.metrics[k]) if r.metrics.get(k) is not None else None for k in keys},
            "checkpoint": r.metrics.get("checkpoint"),
        }
        for r in runs
    ]
    schema_ = {"run": pl.String, "model": pl.String, "dataset": pl.String, "overrides": pl.String}
    schema_ |= {k: pl.Float64 for k in keys} | {"checkpoint": pl.String}
    return pl.DataFrame(rows, schema=schema_)


def markdown(frame: pl.DataFrame) -> str:
    """The key columns of :func:`table` as a markdown pipe table, with the best validation
    value of every monitored metric the runs used (``val/best_<model.monitor>``)."""
    best = sorted(c for c in frame.columns if c.startswith("val/best_"))
    shown = [m for m in TABLE_METRICS if m.startswith("test/")] + best
    shown += [m for m in TABLE_METRICS if not m.startswith("test/")]
    columns = ["run", "model", "dataset", "overrides"] + [m for m in shown if m in frame.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in frame.select(columns).iter_rows():
        cells = [
            f"{v:.4f}" if isinstance(v, float) else ("-" if v in (None, "") else str(v))
            for v in row
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
