"""Statistics of a prepared dataset: length quantiles, suggested length buckets, histogram."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from data_prep import schema


def length_quantiles(lengths: pl.Series) -> dict[str, float]:
    return {
        "p50": float(lengths.quantile(0.5, "nearest")),
        "p90": float(lengths.quantile(0.9, "nearest")),
        "p95": float(lengths.quantile(0.95, "nearest")),
        "p99": float(lengths.quantile(0.99, "nearest")),
        "max": int(lengths.max()),
        "mean": round(float(lengths.mean()), 3),
    }


def suggest_buckets(lengths: np.ndarray, max_buckets: int = 8, waste: float = 0.05) -> list[int]:
    """Length-bucket upper edges minimising padding, by dynamic programming over the histogram.

    A bucket ``(a, b]`` pads its sequences to ``b``; its waste is ``sum(b - len)``. For
    k = 1..max_buckets the optimal k edges are found exactly (O(k m^2), m = distinct lengths);
    the fewest buckets whose total waste is at most ``waste`` x real tokens is returned
    (else the best with ``max_buckets``). The last edge is the maximum length.
    """
    values, counts = np.unique(np.asarray(lengths, dtype=np.int64), return_counts=True)
    m = values.size
    if m == 0:
        return []
    cum_c = np.concatenate([[0], np.cumsum(counts)])
    cum_t = np.concatenate([[0], np.cumsum(counts * values)])

    def cost(i: int, j: np.ndarray) -> np.ndarray:  # bucket values[i..j] padded to values[j]
        return (cum_c[j + 1] - cum_c[i]) * values[j] - (cum_t[j + 1] - cum_t[i])

    total = float(cum_t[-1])
    best = cost(0, np.arange(m)).astype(np.float64)  # best[j]: values[0..j] in 1 bucket
    back: list[np.ndarray] = [np.full(m, -1)]
    found = [int(values[-1])]
    if best[-1] <= waste * total:
        return found
    for _k in range(2, max_buckets + 1):
        new = np.full(m, np.inf)
        arg = np.full(m, -1)
        for i in range(1, m):  # last bucket starts at values[i]: i distinct lengths, not rows
            j = np.arange(i, m)
            c = best[i - 1] + cost(i, j)
            better = c < new[j]
            new[j[better]] = c[better]
            arg[j[better]] = i
        best = new
        back.append(arg)
        edges, j = [], m - 1
        for level in range(len(back) - 1, -1, -1):
            edges.append(int(values[j]))
            i = back[level][j]
            if i <= 0:
                break
            j = i - 1
        found = sorted(edges)
        if best[-1] <= waste * total:
            break
    return found


def padding_waste(lengths: np.ndarray, edges: list[int]) -> float:
    """Fraction of padding tokens (relative to real tokens) when padding to bucket edges."""
    lengths = np.asarray(lengths)
    padded = np.asarray(edges)[np.searchsorted(edges, lengths)]
    return float((padded - lengths).sum() / max(lengths.sum(), 1))


def write_histogram(lengths: pl.Series, meta: Mapping[str, Any], path: Path) -> None:
    """Sequence-length histogram, log-scaled counts, suggested bucket edges as vertical lines."""
    with _PLOT_LOCK:  # matplotlib (its mathtext parser) is not thread-safe
        _draw_histogram(lengths, meta, path)


_PLOT_LOCK = threading.Lock()


def _draw_histogram(lengths: pl.Series, meta: Mapping[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure  # no pyplot: no global figure state, any backend

    lengths = lengths.to_numpy()
    values, counts = np.unique(lengths, return_counts=True)
    q = meta["length_quantiles"]
    fig = Figure(figsize=(9, 4.8), dpi=110)
    ax = fig.subplots()
    ax.bar(values, counts, width=1.0, color="#4C72B0", edgecolor="none", label="users")
    ax.set_yscale("log")
    ax.set_xlim(0, values.max() * 1.04 + 3)  # room for the last edge label
    ax.set_xlabel("sequence length (events per user, after filtering and truncation)")
    ax.set_ylabel("users (log scale)")
    for i, edge in enumerate(meta[schema.META_BUCKETS]):
        ax.axvline(
            edge + 0.5,
            color="#C44E52",
            linestyle="--",
            linewidth=1,
            label="suggested bucket edges" if i == 0 else None,
        )
        ax.annotate(
            str(edge),
            (edge + 0.5, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, -12),
            textcoords="offset points",
            color="#C44E52",
            fontsize=8,
        )
    ax.axvline(q["p50"], color="#55A868", linewidth=1.2, label=f"median {q['p50']:g}")
    ax.axvline(q["p95"], color="#8172B2", linewidth=1.2, label=f"p95 {q['p95']:g}")
    ax.set_title(
        f"{meta['name']}\n{meta['users']:,} users, {meta['items']:,} items, "
        f"{meta['events']:,} events (mean length {q['mean']:.1f})",
        fontsize=11,
    )
    ax.legend(  # outside the axes: inside it would hide bucket-edge labels
        loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False
    )
    ax.grid(axis="y", alpha=0.3, which="major")
    fig.tight_layout()
    fig.savefig(path)
