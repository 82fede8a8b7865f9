"""Small in-memory datasets, and histories read off a prepared folder."""

from pathlib import Path

import numpy as np
import polars as pl

from data_prep import schema
from recsys_seq.data import PreparedSequences


def sequences(histories: list[list[int]], num_items: int | None = None) -> PreparedSequences:
    """A leave-one-out PreparedSequences over the given item histories (user u = row u),
    with prep's rules: training events end at the validation target, and only they are
    counted."""
    lengths = np.array([len(h) for h in histories], dtype=np.int64)
    offsets = np.zeros(len(histories) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    items = np.concatenate([np.asarray(h, dtype=np.int64) for h in histories])
    num_items = num_items or int(items.max())
    train_end = lengths - 2  # the validation target's position
    training = np.concatenate(
        [np.asarray(h[:end]) for h, end in zip(histories, train_end, strict=True)]
    )
    return PreparedSequences(
        items=items,
        offsets=offsets,
        users=np.arange(len(histories), dtype=np.int64),
        val_index=lengths - 2,
        test_index=lengths - 1,
        train_end=train_end,
        item_counts=np.bincount(training.astype(np.int64), minlength=num_items + 1),
        features={"category": items % 3 + 1},
        meta={"items": num_items, "item_fingerprint": "test"},
    )


def random_histories(n_users: int, num_items: int, max_len: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, max_len + 1, size=n_users)
    return [rng.integers(1, num_items + 1, size=n).tolist() for n in lengths]


def histories(data_dir: Path, users: int) -> list[list[int]]:
    """The whole known histories of the first ``users`` users, in original item ids."""
    items = pl.read_parquet(data_dir / schema.ITEMS_FILE).select(schema.ITEM, schema.ORIGINAL_ID)
    frame = pl.read_parquet(data_dir / schema.SEQUENCES_FILE).sort(schema.USER).head(users)
    return (
        frame.select(schema.USER, schema.ITEMS)
        .explode(schema.ITEMS)
        .join(items, left_on=schema.ITEMS, right_on=schema.ITEM, maintain_order="left")
        .group_by(schema.USER, maintain_order=True)
        .agg(schema.ORIGINAL_ID)[schema.ORIGINAL_ID]
        .to_list()
    )
