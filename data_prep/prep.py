"""The prep job: raw behaviour log -> prepared dataset folder (see :mod:`data_prep.schema`).

The job is a Polars plan built by :func:`build_plan` from a reader's LazyFrame (expressions
only, no Python loops over rows) and run in one place, :func:`prepare`, which collects the plan,
computes the small summaries for ``meta.json`` and writes the folder atomically::

    scan (format reader) -> drop null ids -> time order (timestamp, then original row)
      -> [dedup consecutive repeats] -> min_user_events filter -> keep the last max_len events
      -> item ids 1..N by descending frequency, users 0..U-1 by original id, side-feature codes
      -> one row per user: parallel lists + leave-one-out val/test indices
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from data_prep import schema
from data_prep.formats import ROW, PrepError, load_format, scan

PAD_TOKEN = "<pad>"

DEFAULTS: dict[str, Any] = {
    "name": None,  # dataset name for titles; default: the output folder's name
    "input": None,
    "output": None,
    "format": "csv",
    "min_user_events": 3,
    "max_len": 200,
    "dedup": "none",  # none | consecutive (drop an event repeating the previous item)
    "side_features": list(schema.SIDE_FEATURES),
    "max_buckets": 8,
    "bucket_waste": 0.05,  # fewest buckets whose padding waste is at most this fraction
    "reuse_existing": False,  # keep an existing output with the same fingerprint, skip the job
}


@dataclass
class Plan:
    """The lazy outputs of the job; nothing is computed until :func:`run_plan`."""

    sequences: pl.LazyFrame
    items: pl.LazyFrame
    users: pl.LazyFrame
    vocab: dict[str, pl.LazyFrame]  # side feature -> (code, value) sorted by code


def resolve_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Fill defaults, resolve the format by name, check option values."""
    unknown = set(cfg) - set(DEFAULTS) - {"hydra"}
    if unknown:
        raise PrepError(f"Unknown prep option(s): {sorted(unknown)}; known: {sorted(DEFAULTS)}.")
    out = {**DEFAULTS, **{k: v for k, v in cfg.items() if k != "hydra"}}
    out["format"] = load_format(out["format"])
    if out["input"] is None or out["output"] is None:
        raise PrepError("Both input=<raw file> and output=<folder> must be given.")
    out["input"], out["output"] = str(out["input"]), str(out["output"])
    if not Path(out["input"]).is_file():
        raise PrepError(
            f"Input file not found: {out['input']} (format {out['format'].get('name')!r}); "
            "give an existing raw log with input=<path>."
        )
    out["side_features"] = list(out["side_features"] or [])
    bad = [f for f in out["side_features"] if f not in schema.SIDE_FEATURE_SOURCES]
    if bad:
        raise PrepError(f"Unknown side feature(s) {bad}; known: {list(schema.SIDE_FEATURES)}.")
    if out["dedup"] not in ("none", "consecutive"):
        raise PrepError(f"dedup must be 'none' or 'consecutive', not {out['dedup']!r}.")
    for key in ("min_user_events", "max_len", "max_buckets"):
        if int(out[key]) < 1:
            raise PrepError(f"{key} must be >= 1, got {out[key]}.")
    if out["name"] is None:
        out["name"] = Path(out["output"]).name
    return out


def build_plan(raw: pl.LazyFrame, cfg: Mapping[str, Any]) -> Plan:
    """Build the lazy job from canonical raw columns (a reader's output) and a resolved config."""
    user, item, ts = schema.RAW_USER, schema.RAW_ITEM, schema.RAW_TIMESTAMP
    present = raw.collect_schema().names()
    features = {
        name: schema.SIDE_FEATURE_SOURCES[name]
        for name in cfg["side_features"]
        if schema.SIDE_FEATURE_SOURCES[name] in present
    }
    per_user = pl.len().cast(pl.Int64).over(user)  # Int64: len() is UInt32, and n - max_len < 0

    events = (
        raw.with_row_index(ROW)
        .drop_nulls([user, item, ts])
        .sort([user, ts, ROW])  # time order; ties keep original row order
    )
    if cfg["dedup"] == "consecutive":
        events = events.filter(pl.col(item).ne_missing(pl.col(item).shift(1).over(user)))
    events = (
        events.filter(per_user >= int(cfg["min_user_events"])).filter(
            pl.int_range(pl.len()).over(user) >= per_user - int(cfg["max_len"])
        )  # most recent
    )

    item_map = (
        events.group_by(item)
        .agg(pl.len().alias("_freq"))
        .sort(["_freq", item], descending=[True, False])
        .with_row_index(schema.ITEM, offset=schema.PAD + 1)
        .select(pl.col(schema.ITEM).cast(pl.Int64), item)
    )
    user_map = (
        events.select(user)
        .unique()
        .sort(user)
        .with_row_index(schema.USER)
        .select(pl.col(schema.USER).cast(pl.Int64), user)
    )
    vocab = {
        name: (
            events.drop_nulls(src)
            .group_by(src)
            .agg(pl.len().alias("_freq"))
            .sort(["_freq", src], descending=[True, False])
            .with_row_index("code", offset=schema.PAD + 1)
            .select(
                pl.col("code").cast(pl.Int64),
                pl.col(src).cast(pl.String).alias("value"),
                pl.col(src).alias(src),
            )
        )
        for name, src in features.items()
    }

    mapped = events.join(item_map, on=item, how="left").join(user_map, on=user, how="left")
    for name, src in features.items():
        mapped = mapped.join(
            vocab[name].select(src, pl.col("code").alias(f"_code_{name}")), on=src, how="left"
        ).with_columns(pl.col(f"_code_{name}").fill_null(schema.PAD))

    order = [ts, ROW]
    n = pl.col(schema.ITEMS).list.len()
    sequences = (
        mapped.group_by(schema.USER)
        .agg(
            pl.col(schema.ITEM).sort_by(order).alias(schema.ITEMS),
            pl.col(ts).sort_by(order).alias(schema.TIMESTAMPS),
            *(pl.col(f"_code_{name}").sort_by(order).alias(name) for name in features),
        )
        .with_columns(
            pl.when(n >= 3).then(n - 2).cast(pl.Int64).alias(schema.VAL_INDEX),
            pl.when(n >= 2).then(n - 1).cast(pl.Int64).alias(schema.TEST_INDEX),
        )
        .sort(schema.USER)
    )

    train_end = pl.coalesce(schema.VAL_INDEX, schema.TEST_INDEX, n)
    train_counts = (
        sequences.select(pl.col(schema.ITEMS).list.slice(0, train_end).alias(schema.ITEM))
        .explode(schema.ITEM)
        .drop_nulls()
        .group_by(schema.ITEM)
        .agg(pl.len().cast(pl.Int64).alias(schema.COUNT))
    )
    items = (
        item_map.join(train_counts, on=schema.ITEM, how="left")
        .with_columns(pl.col(schema.COUNT).fill_null(0))
        .rename({item: schema.ORIGINAL_ID})
    )
    if "category" in features:
        item_category = (
            mapped.group_by(schema.ITEM, "_code_category")
            .agg(pl.len().alias("_freq"))
            .sort([schema.ITEM, "_freq", "_code_category"], descending=[False, True, False])
            .unique(schema.ITEM, keep="first", maintain_order=True)
            .select(schema.ITEM, pl.col("_code_category").alias("category"))
        )
        items = items.join(item_category, on=schema.ITEM, how="left")
    items = items.sort(schema.ITEM)
    users = user_map.rename({user: schema.ORIGINAL_ID}).sort(schema.USER)
    vocab = {name: v.select("code", "value").sort("code") for name, v in vocab.items()}
    return Plan(sequences=sequences, items=items, users=users, vocab=vocab)


# ---------------------------------------------------------------------------- summaries


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


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(cfg: Mapping[str, Any]) -> str:
    """Hash of the input bytes and every option that changes the result (not paths/names)."""
    relevant = {
        k: v for k, v in cfg.items() if k not in ("input", "output", "name", "reuse_existing")
    }
    payload = json.dumps(relevant, sort_keys=True, default=str)
    return hashlib.sha256((file_sha256(Path(cfg["input"])) + payload).encode()).hexdigest()


def item_fingerprint(original_ids: pl.Series) -> str:
    """Hash of the original item ids in index order: equal iff the item vocabulary is equal."""
    return hashlib.sha256("\n".join(original_ids.cast(pl.String).to_list()).encode()).hexdigest()


def read_meta(folder: str | Path) -> dict[str, Any] | None:
    path = Path(folder) / schema.META_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------- running


def run_plan(plan: Plan) -> dict[str, pl.DataFrame]:
    """The one place the job is computed."""
    names = ["sequences", "items", "users", *(f"vocab:{k}" for k in plan.vocab)]
    frames = pl.collect_all([plan.sequences, plan.items, plan.users, *plan.vocab.values()])
    return dict(zip(names, frames, strict=True))


def prepare(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Run the prep job for ``cfg`` (the keys of ``conf/prep.yaml``) and return ``meta.json``.

    Raises:
        PrepError: a user error (missing file/column, bad option, nothing left after filters).
    """
    cfg = resolve_config(cfg)
    out = Path(cfg["output"])
    fp = fingerprint(cfg)
    if cfg["reuse_existing"]:
        meta = read_meta(out)
        if meta is not None and meta.get(schema.META_FINGERPRINT) == fp:
            return meta

    raw = scan(cfg["input"], cfg["format"])
    plan = build_plan(raw, cfg)
    try:
        frames = run_plan(plan)
    except pl.exceptions.PolarsError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PrepError(
            f"Could not prepare {cfg['input']} with format {cfg['format'].get('name')!r}: {first}"
        ) from None
    seqs = frames["sequences"]
    if seqs.height == 0:
        raise PrepError(
            f"No users left in {cfg['input']} after filtering (min_user_events="
            f"{cfg['min_user_events']}); check the input and the column mapping."
        )
    meta = make_meta(cfg, frames, fp)
    write_dataset(out, frames, meta, accept_same=bool(cfg["reuse_existing"]))
    return read_meta(out) or meta


def make_meta(cfg: Mapping[str, Any], frames: dict[str, pl.DataFrame], fp: str) -> dict[str, Any]:
    seqs, items = frames["sequences"], frames["items"]
    lengths = seqs[schema.ITEMS].list.len()
    buckets = suggest_buckets(
        lengths.to_numpy(), int(cfg["max_buckets"]), float(cfg["bucket_waste"])
    )
    vocab = {
        key.split(":", 1)[1]: [PAD_TOKEN, *frame["value"].to_list()]
        for key, frame in frames.items()
        if key.startswith("vocab:")
    }
    return {
        schema.META_SCHEMA_VERSION: schema.SCHEMA_VERSION,
        "name": cfg["name"],
        "config": dict(cfg),
        schema.META_FINGERPRINT: fp,
        schema.META_ITEM_FINGERPRINT: item_fingerprint(items[schema.ORIGINAL_ID]),
        "users": seqs.height,
        "items": items.height,
        "events": int(lengths.sum()),
        "length_quantiles": length_quantiles(lengths),
        schema.META_BUCKETS: buckets,
        "bucket_padding_waste": round(padding_waste(lengths.to_numpy(), buckets), 4),
        schema.META_SIDE_FEATURES: {name: len(v) for name, v in vocab.items()},
        schema.META_VOCAB: vocab,
        "split": "leave_one_out",
    }


def write_dataset(
    out: Path, frames: dict[str, pl.DataFrame], meta: dict[str, Any], accept_same: bool = False
) -> Path:
    """Write the folder next to ``out`` and rename it into place.

    A failure before the rename leaves ``out`` as it was (or absent). An existing ``out`` is
    replaced only once the new folder is complete. With ``accept_same``, an ``out`` that another
    process published meanwhile with the same fingerprint is kept and ours discarded.
    """
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = out.parent / f".{out.name}.tmp-{tag}"
    tmp.mkdir()
    try:
        frames["sequences"].write_parquet(tmp / schema.SEQUENCES_FILE)
        frames["items"].write_parquet(tmp / schema.ITEMS_FILE)
        frames["users"].write_parquet(tmp / schema.USERS_FILE)
        write_histogram(frames["sequences"], meta, tmp / schema.HISTOGRAM_FILE)
        (tmp / schema.META_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n")
        _publish(tmp, out, meta[schema.META_FINGERPRINT], accept_same, tag)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _publish(tmp: Path, out: Path, fp: str, accept_same: bool, tag: str) -> None:
    for _attempt in range(5):
        if accept_same:
            existing = read_meta(out)
            if existing is not None and existing.get(schema.META_FINGERPRINT) == fp:
                return  # someone else published the same dataset; ours is discarded
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{tag}"
            try:
                os.rename(out, old)
            except FileNotFoundError:  # another process moved it meanwhile
                old = None
        try:
            os.rename(tmp, out)  # atomic; fails if another process created out meanwhile
        except OSError:
            if old is not None and not out.exists():
                os.rename(old, out)
            continue
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return
    raise PrepError(f"Could not move the prepared dataset into {out}: it keeps changing.")


def write_histogram(seqs: pl.DataFrame, meta: Mapping[str, Any], path: Path) -> None:
    """Sequence-length histogram, log-scaled counts, suggested bucket edges as vertical lines."""
    with _PLOT_LOCK:  # matplotlib (its mathtext parser) is not thread-safe
        _draw_histogram(seqs, meta, path)


_PLOT_LOCK = threading.Lock()


def _draw_histogram(seqs: pl.DataFrame, meta: Mapping[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure  # no pyplot: no global figure state, any backend

    lengths = seqs[schema.ITEMS].list.len().to_numpy()
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
        f"{meta['name']}: {meta['users']:,} users, {meta['items']:,} items, "
        f"{meta['events']:,} events (mean length {q['mean']:.1f})",
        fontsize=11,
    )
    ax.legend(
        loc="upper right", bbox_to_anchor=(0.92, 1.0), fontsize=8, frameon=True, framealpha=0.9
    )
    ax.grid(axis="y", alpha=0.3, which="major")
    fig.tight_layout()
    fig.savefig(path)
