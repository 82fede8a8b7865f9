"""The two jobs the benchmark compares, the same steps on the same log: the prep job itself
(:func:`polars_job`) and those steps in idiomatic vectorised pandas (:func:`pandas_job`), and
the check that both wrote the same tables (:func:`check_same_output`) before a ratio is
reported. The job: parquet log -> consecutive dedup -> 5-core users and items -> last 200
events -> ids by frequency -> category and event-type lists -> leave-one-out.

pandas is a bench extra, imported only here. The harness (:mod:`~recsys_seq.bench.prep`)
runs each job in its own subprocess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from recsys_seq.bench.prep_log import FORMAT

JOB = {
    "dedup": "consecutive",
    "min_user_events": 5,
    "min_item_events": 5,
    "max_len": 200,
    "side_features": ["category", "event"],
}


def polars_job(log: str, out: str, cluster: str | None = None) -> dict[str, Any]:
    """The prep job, in this process or on the Dask cluster at address ``cluster``."""
    from data_prep import prepare

    meta = prepare({"input": log, "output": out, "format": FORMAT, "cluster": cluster, **JOB})
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


def check_same_prepared(one: Path, other: Path, rows: int = 500_000) -> None:
    """Raise unless two recsys-prep outputs hold the same tables, compared ``rows`` rows at a
    time (both are written in key order), so a 200M-event log is checked in bounded memory."""
    import polars as pl
    from polars.testing import assert_frame_equal

    for name in ("sequences", "items", "users"):
        a, b = (pl.scan_parquet(folder / f"{name}.parquet") for folder in (one, other))
        height = a.select(pl.len()).collect().item()
        assert height == b.select(pl.len()).collect().item(), name
        for start in range(0, height, rows):
            assert_frame_equal(a.slice(start, rows).collect(), b.slice(start, rows).collect())
