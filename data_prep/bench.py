"""Benchmark of the prep job (not a test): events/s and peak memory at 50M events, and the
same steps written in pandas on a smaller log for a side-by-side ratio.

``recsys-bench prep output=FILE.json events=50000000 pandas_events=2000000`` (the dispatcher
calls :func:`main` with the remaining ``key=value`` arguments). pandas is a bench extra,
imported only here.

Each measured job runs in its own subprocess, which reports its wall time and its peak
resident memory (``ru_maxrss`` of that process: Polars' threads included, the generator and
the parent excluded). The job: parquet log -> consecutive dedup -> 5-core users and items ->
last 200 events -> ids by frequency -> category and event-type lists -> leave-one-out.
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

    ~50 events per user on average (users drawn uniformly), items Zipf-like over
    ``events / 50`` ids, 1,000 categories, event types pv >> cart > fav > buy, timestamps
    increasing with the row (a log is appended in time order) plus jitter.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    n_users, n_items = max(events // 50, 10), max(events // 50, 10)
    item_category = rng.integers(0, 1000, n_items, dtype=np.int32)
    event_dict = pa.array(EVENT_TYPES)
    writer = None
    try:
        for start in range(0, events, chunk):
            n = min(chunk, events - start)
            items = (rng.pareto(1.2, n) * 3).astype(np.int64) % n_items
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
    """The same steps in idiomatic pandas (vectorised; groupby for per-user work)."""
    import pandas as pd

    df = pd.read_parquet(log)
    df["row"] = np.arange(len(df))
    df = df.sort_values(["user_id", "timestamp", "row"], kind="stable")
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
    df = df[from_end < JOB["max_len"]]
    freq = df["item_id"].value_counts()
    freq = (
        freq.rename_axis("item_id")
        .reset_index(name="n")
        .sort_values(["n", "item_id"], ascending=[False, True])
    )
    item_code = pd.Series(np.arange(1, len(freq) + 1), index=freq["item_id"].to_numpy())
    df["item"] = item_code.reindex(df["item_id"].to_numpy()).to_numpy()
    for col in ("category", "event_type"):
        vc = df[col].astype(str).value_counts()
        codes = pd.Series(np.arange(1, len(vc) + 1), index=vc.index)
        df[col + "_code"] = codes.reindex(df[col].astype(str).to_numpy()).to_numpy()
    df["user"] = df["user_id"].rank(method="dense").astype(np.int64) - 1
    seqs = df.groupby("user", sort=True).agg(
        items=("item", list),
        timestamps=("timestamp", list),
        category=("category_code", list),
        event=("event_type_code", list),
    )
    n = seqs["items"].map(len)
    seqs["val_index"] = (n - 2).where(n >= 3)
    seqs["test_index"] = (n - 1).where(n >= 2)
    Path(out).mkdir(parents=True, exist_ok=True)
    seqs.reset_index().to_parquet(Path(out) / "sequences.parquet")
    return {"users": len(seqs), "items": len(freq), "events": int(n.sum())}


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
    events: int = 50_000_000, pandas_events: int = 2_000_000, output: str | None = None
) -> list[dict[str, Any]]:
    """Generate the logs, run the jobs, print a table, write JSON rows to ``output``."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="recsys-prep-bench-") as tmp:
        tmp = Path(tmp)
        small = generate_log(tmp / "small.parquet", pandas_events, seed=1)
        for engine in ("polars", "pandas"):
            rows.append(measure(engine, small, pandas_events, tmp / f"out-{engine}-small"))
        start = time.perf_counter()
        big = generate_log(tmp / "big.parquet", events, seed=0)
        generated = time.perf_counter() - start
        rows.append(measure("polars", big, events, tmp / "out-polars-big"))
    rows[-1]["generate_seconds"] = generated
    ratio = rows[0]["events_per_s"] / rows[1]["events_per_s"]
    for row in rows:
        row["polars_vs_pandas_same_log"] = ratio
    _print(rows)
    if output:
        Path(output).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def _print(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="recsys-prep benchmark (same steps: dedup, 5-core, max_len 200, LOO)")
    for col in ("engine", "input events", "kept events", "users", "s", "events/s", "peak RSS"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["engine"],
            f"{r['input_events']:,}",
            f"{r['events']:,}",
            f"{r['users']:,}",
            f"{r['seconds']:.1f}",
            f"{r['events_per_s']:,.0f}",
            f"{r['peak_rss_mb']:,.0f} MB",
        )
    console = Console()
    console.print(table)
    console.print(
        f"polars / pandas events/s on the same {rows[0]['input_events']:,}-event log: "
        f"{rows[0]['polars_vs_pandas_same_log']:.1f}x"
    )


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """``key=value`` arguments: ``events``, ``pandas_events``, ``output``."""
    args = dict(a.split("=", 1) for a in (sys.argv[1:] if argv is None else argv))
    unknown = set(args) - {"events", "pandas_events", "output"}
    if unknown:
        raise SystemExit(f"recsys-bench prep: unknown argument(s) {sorted(unknown)}")
    return run_prep_benchmark(
        events=int(args.get("events", 50_000_000)),
        pandas_events=int(args.get("pandas_events", 2_000_000)),
        output=args.get("output"),
    )


if __name__ == "__main__":
    main()
