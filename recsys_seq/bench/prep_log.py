"""The benchmark's input: a synthetic click log as parquet, of any size, generated chunk by
chunk in bounded memory, and the format the prep job reads it with (:data:`FORMAT`).

It is the fixture both jobs read, independent of either, so it sits apart from the jobs
(:mod:`~recsys_seq.bench.prep_jobs`) and from the harness that times them
(:mod:`~recsys_seq.bench.prep`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

EVENT_TYPES = ["pv", "cart", "fav", "buy"]
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
    """A click log as one parquet file, written chunk by chunk (vectorised, bounded memory).

    ~50 events per user on average (users drawn uniformly); items Zipf over a catalogue of
    ``events / 50`` ids (1M at 50M events; the item of popularity rank r has probability
    ~ 1/(r + 1.5), ranks shuffled over the ids), so a long tail of items misses the 5-core as
    in a real click log (the earlier Pareto(1.2) draw left ~1,000 items after it at any size);
    1,000 categories, event types pv >> cart > fav > buy, timestamps increasing with the row
    (a log is appended in time order) plus jitter.
    """
    import pyarrow.parquet as pq

    writer = None
    try:
        for table in _chunks(events, seed, chunk):
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    return path


def generate_log_folder(folder: Path, events: int, seed: int = 0, chunk: int = 5_000_000) -> Path:
    """The same log as :func:`generate_log`, as a folder of parquet parts of ``chunk`` events
    each, in row order (``part-00000.parquet``, ...): how a cluster's log comes."""
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    for i, table in enumerate(_chunks(events, seed, chunk)):
        pq.write_table(table, folder / f"part-{i:05d}.parquet")
    return folder


def _chunks(events: int, seed: int, chunk: int) -> Iterator[Any]:
    """The log's rows as pyarrow tables of ``chunk`` rows (the last one shorter)."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    n_users, n_items = max(events // 50, 10), max(events // 50, 10)
    item_category = rng.integers(0, 1000, n_items, dtype=np.int32)
    item_of_rank = rng.permutation(n_items)  # popularity is not the id order
    event_dict = pa.array(EVENT_TYPES)
    for start in range(0, events, chunk):
        n = min(chunk, events - start)
        # Zipf (exponent 1) by inverse CDF of the density 1/x on [1, n_items + 1)
        rank = np.exp(rng.random(n) * np.log(n_items + 1)).astype(np.int64) - 1
        items = item_of_rank[np.minimum(rank, n_items - 1)]
        row = np.arange(start, start + n, dtype=np.int64)
        yield pa.table(
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
