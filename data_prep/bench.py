"""Benchmark of the prep job (not a test): events/s and peak memory at 50M events, and the
same steps written in pandas on a smaller log for a side-by-side ratio.

``recsys-bench prep output=FILE.json events=50000000 pandas_events=5000000 repeats=3`` (the
dispatcher calls :func:`main` with the remaining ``key=value`` arguments; ``events=0`` skips
the big log). pandas is a bench extra, imported only here.

Each measured job runs in its own subprocess, which reports its wall time and its peak
resident memory (``ru_maxrss`` of that process: Polars' threads included, the generator and
the parent excluded). The job: parquet log -> consecutive dedup -> 5-core users and items ->
last 200 events -> ids by frequency -> category and event-type lists -> leave-one-out.

Fairness: on the small log the two engines run alternately ``repeats`` times and the medians
are compared (a shared machine is noisy). The pandas version (:func:`pandas_job`) is the same
steps in idiomatic vectorised pandas, with no deliberate slowness, and must write the same
``sequences``, ``items`` and ``users`` tables as the Polars job: the bench checks that before
it reports a ratio. The Polars job additionally checks the input values, hashes the input file
and draws the histogram (a few tenths of a second at 5M events), which count against it.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from data_prep import publish

EVENT_TYPES = ["pv", "cart", "fav", "buy"]
JOB = {
    "dedup": "consecutive",
    "min_user_events": 5,
    "min_item_events": 5,
    "max_len": 200,
    "side_features": ["category", "event"],
}
FORMAT = {
    "name": "bench",
    "reader": "parquet",
    "columns": {
        "user_id": "user_id",
        "item_id": "item_id",
        "timestamp": "timestamp",
        "event_type": "event_type",
        "category": "category",
    },
}


def generate_log(path: Path, events: int, seed: int = 0, chunk: int = 5_000_000) -> Path:
    """A click log as parquet, written chunk by chunk (vectorised, bounded memory).

    ~50 events per user on average (users drawn uniformly); items Zipf over a catalogue of
    ``events / 50`` ids (1M at 50M events; the item of popularity rank r has probability
    ~ 1/(r + 1.5), ranks shuffled over the ids), so a long tail of items misses the 5-core as
    in a real click log (the earlier Pareto(1.2) draw left ~1,000 items after it at any size);
    1,000 categories, event types pv >> cart > fav > buy, timestamps increasing with the row
    (a log is appended in time order) plus jitter.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    n_users, n_items = max(events // 50, 10), max(events // 50, 10)
    item_category = rng.integers(0, 1000, n_items, dtype=np.int32)
    item_of_rank = rng.permutation(n_items)  # popularity is not the id order
    event_dict = pa.array(EVENT_TYPES)
    writer = None
    try:
        for start in range(0, events, chunk):
            n = min(chunk, events - start)
            # Zipf (exponent 1) by inverse CDF of the density 1/x on [1, n_items + 1)
            rank = np.exp(rng.random(n) * np.log(n_items + 1)).astype(np.int64) - 1
            items = item_of_rank[np.minimum(rank, n_items - 1)]
            row = np.arange(start, start + n, dtype=np.int64)
            table = pa.table(
                {
                    "user_id": rng.integers(0, n_users, n, dtype=np.int64) * 7 + 1_000_000,
                    "item_id": items * 13 + 5_000_000,
                    "timestamp": 1_600_000_000 + row // 20 + rng.integers(0, 60, n),
                    "event_type": pa.DictionaryArray.from_arrays(
                        pa.array(rng.choice(4, n, p=[0.85, 0.08, 0.04, 0.03]).astype(np.int8)),
                        event_dict,
                    ),
                    "category": item_category[items],
                }
            )
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    return path


def polars_job(log: str, out: str) -> dict[str, Any]:
    from data_prep import prepare

    meta = prepare({"input": log, "output": out, "format": FORMAT, **JOB})
    return {"users": meta["users"], "items": meta["items"], "events": meta["events"]}


def pandas_job(log: str, out: str) -> dict[str, Any]:
    """The same steps in idiomatic, vectorised pandas, producing the same three tables.

    Written to be fair, not slow: one sort, boolean masks, ``value_counts``/``isin`` for the
    k-core, ``groupby().cumcount`` for truncation, codes by ``value_counts`` order (ties by
    value, as :func:`data_prep.steps.frequency_codes`), categorical columns mapped through
    their small code table, and ``groupby().agg(list)`` for the per-user lists (pandas has no
    native list column, so lists are Python objects). ``sequences``, ``items`` and ``users``
    equal the Polars job's (checked by :func:`check_same_output`). Not done here, but done
    by the Polars job: input value checks, input hash, ``meta.json`` and the histogram.
    """
    import pandas as pd

    df = pd.read_parquet(log)
    df["row"] = np.arange(len(df))
    df = df.sort_values(["user_id", "timestamp", "row"])
    same = (df["user_id"] == df["user_id"].shift()) & (df["item_id"] == df["item_id"].shift())
    df = df[~same]
    while True:  # iterative k-core
        uc, ic = df["user_id"].value_counts(), df["item_id"].value_counts()
        ku = uc.index[uc >= JOB["min_user_events"]]
        ki = ic.index[ic >= JOB["min_item_events"]]
        if len(ku) == len(uc) and len(ki) == len(ic):
            break
        df = df[df["user_id"].isin(ku) & df["item_id"].isin(ki)]
    from_end = df.groupby("user_id", sort=False).cumcount(ascending=False)
    df = df[from_end < JOB["max_len"]].copy()
    item_code = _pandas_codes(df["item_id"])
    df["item"] = item_code.reindex(df["item_id"].to_numpy()).to_numpy()
    for col in ("category", "event_type"):
        codes = _pandas_codes(df[col])
        if isinstance(df[col].dtype, pd.CategoricalDtype):  # via the category codes
            table = codes.reindex(df[col].cat.categories).fillna(0).to_numpy(np.int64)
            df[col + "_code"] = table[df[col].cat.codes.to_numpy()]
        else:
            df[col + "_code"] = codes.reindex(df[col].to_numpy()).to_numpy()
    new_user = df["user_id"] != df["user_id"].shift()  # rows are sorted by user
    df["user"] = new_user.cumsum() - 1
    seqs = df.groupby("user", sort=True).agg(
        items=("item", list),
        timestamps=("timestamp", list),
        category=("category_code", list),
        event=("event_type_code", list),
    )
    n = seqs["items"].map(len)
    seqs["val_index"] = (n - 2).where(n >= 3).astype("Int64")
    seqs["test_index"] = (n - 1).where(n >= 2).astype("Int64")
    # items: training count (items[:val_index], else [:test_index]) and top category
    train_end = seqs["val_index"].fillna(seqs["test_index"]).fillna(n).astype(np.int64)
    position = df.groupby("user", sort=False).cumcount()
    in_train = position.to_numpy() < train_end.reindex(df["user"].to_numpy()).to_numpy()
    counts = df.loc[in_train, "item"].value_counts()
    top = (
        df.groupby(["item", "category_code"], sort=False)
        .size()
        .reset_index(name="n")
        .sort_values(["item", "n", "category_code"], ascending=[True, False, True])
        .drop_duplicates("item")
        .set_index("item")["category_code"]
    )
    items = pd.DataFrame({"item": item_code.to_numpy(), "original_id": item_code.index})
    items["count"] = counts.reindex(items["item"]).fillna(0).astype(np.int64).to_numpy()
    items["category"] = top.reindex(items["item"]).to_numpy()
    users = df.loc[new_user.to_numpy(), ["user", "user_id"]]
    users = users.rename(columns={"user_id": "original_id"})
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    seqs.reset_index().to_parquet(folder / "sequences.parquet")
    items.to_parquet(folder / "items.parquet", index=False)
    users.to_parquet(folder / "users.parquet", index=False)
    return {"users": len(seqs), "items": len(items), "events": int(n.sum())}


def _pandas_codes(values) -> Any:
    """value -> code 1.. by descending count, ties by value (a pandas Series)."""
    import pandas as pd

    counts = values.value_counts()
    counts = counts[counts > 0]  # a categorical's unused categories
    order = pd.DataFrame({"value": counts.index, "n": counts.to_numpy()})
    key = order["value"].astype(str) if isinstance(values.dtype, pd.CategoricalDtype) else None
    order = order.assign(key=order["value"] if key is None else key)
    order = order.sort_values(["n", "key"], ascending=[False, True])
    return pd.Series(np.arange(1, len(order) + 1), index=pd.Index(order["value"].to_list()))


def check_same_output(polars_out: Path, pandas_out: Path) -> None:
    """Raise unless both jobs wrote the same sequences, items and users (values, not files)."""
    import polars as pl
    from polars.testing import assert_frame_equal

    for name, sort in (("sequences", "user"), ("items", "item"), ("users", "user")):
        ours = pl.read_parquet(polars_out / f"{name}.parquet")
        theirs = pl.read_parquet(pandas_out / f"{name}.parquet").select(ours.columns)
        theirs = theirs.cast(ours.schema)  # pandas' int32 categories, nullable indices
        assert_frame_equal(ours.sort(sort), theirs.sort(sort))


def _child(engine: str, log: str, out: str) -> None:
    """Subprocess entry: run one job, print its counts, seconds and own peak RSS as JSON."""
    job = polars_job if engine == "polars" else pandas_job
    if engine == "polars":  # imports are not the job's work
        import matplotlib.figure  # noqa: F401

        import data_prep.prep  # noqa: F401
    else:
        import pandas  # noqa: F401
    start = time.perf_counter()
    counts = job(log, out)
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps({**counts, "seconds": seconds, "peak_rss_mb": peak_kib / 1024}))


def measure(engine: str, log: Path, events: int, out: Path) -> dict[str, Any]:
    code = f"from data_prep.bench import _child; _child({engine!r}, {str(log)!r}, {str(out)!r})"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{engine} job failed:\n{res.stderr[-3000:]}")
    row = json.loads(res.stdout.strip().splitlines()[-1])
    return {
        "engine": engine,
        "input_events": events,
        **row,
        "events_per_s": events / row["seconds"],
    }


def run_prep_benchmark(
    events: int = 50_000_000,
    pandas_events: int = 2_000_000,
    output: str | None = None,
    repeats: int = 1,
) -> list[dict[str, Any]]:
    """Generate the logs, run the jobs, print a table, write JSON rows to ``output``.

    Returns one row per measurement and, per engine and log, a ``median`` row (the ratio is
    the ratio of the small log's median events/s).
    """
    rows = []
    with tempfile.TemporaryDirectory(prefix="recsys-prep-bench-") as tmp:
        tmp = Path(tmp)
        small = generate_log(tmp / "small.parquet", pandas_events, seed=1)
        for repeat in range(repeats):
            for engine in ("polars", "pandas"):
                out = tmp / f"out-{engine}-small-{repeat}"
                rows.append({**measure(engine, small, pandas_events, out), "repeat": repeat})
            if repeat == 0:
                check_same_output(tmp / "out-polars-small-0", tmp / "out-pandas-small-0")
        medians = [_median([r for r in rows if r["engine"] == e]) for e in ("polars", "pandas")]
        if events:
            start = time.perf_counter()
            big = generate_log(tmp / "big.parquet", events, seed=0)
            generated = time.perf_counter() - start
            big_row = measure("polars", big, events, tmp / "out-polars-big")
            rows.append({**big_row, "repeat": 0, "generate_seconds": generated})
            medians.append({**rows[-1], "repeat": "median"})
    rows += medians
    ratio = medians[0]["events_per_s"] / medians[1]["events_per_s"]
    for row in rows:
        row["polars_vs_pandas_same_log"] = ratio
    _print(rows)
    if output:
        publish.write_rows(output, rows, "prep")
    return rows


def _median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run (by seconds) of one engine on one log; peak RSS is the largest."""
    ordered = sorted(rows, key=lambda r: r["seconds"])
    return {
        **ordered[(len(ordered) - 1) // 2],
        "repeat": "median",
        "runs_seconds": [round(r["seconds"], 2) for r in rows],
        "peak_rss_mb": max(r["peak_rss_mb"] for r in rows),
    }


def _print(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="recsys-prep benchmark (same steps: dedup, 5-core, max_len 200, LOO)")
    for col in (
        "engine",
        "run",
        "input events",
        "kept events",
        "users",
        "items",
        "s",
        "events/s",
        "peak RSS",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["engine"],
            str(r["repeat"]),
            f"{r['input_events']:,}",
            f"{r['events']:,}",
            f"{r['users']:,}",
            f"{r['items']:,}",
            f"{r['seconds']:.1f}",
            f"{r['events_per_s']:,.0f}",
            f"{r['peak_rss_mb']:,.0f} MB",
        )
    console = Console()
    console.print(table)
    console.print(
        f"polars / pandas median events/s on the same {rows[0]['input_events']:,}-event log: "
        f"{rows[0]['polars_vs_pandas_same_log']:.1f}x"
    )


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """``key=value`` arguments: ``events``, ``pandas_events``, ``output``, ``repeats``."""
    args = dict(a.split("=", 1) for a in (sys.argv[1:] if argv is None else argv))
    unknown = set(args) - {"events", "pandas_events", "output", "repeats"}
    if unknown:
        raise SystemExit(f"recsys-bench prep: unknown argument(s) {sorted(unknown)}")
    return run_prep_benchmark(
        events=int(args.get("events", 50_000_000)),
        pandas_events=int(args.get("pandas_events", 2_000_000)),
        output=args.get("output"),
        repeats=int(args.get("repeats", 1)),
    )


if __name__ == "__main__":
    main()
