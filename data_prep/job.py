"""Run the steps of :mod:`data_prep.steps` over user partitions, so memory is bounded by the
largest partition instead of the log.

Polars' streaming engine runs row-wise work and group-by counts in bounded memory, but a sort
or a list aggregation per user holds its whole input. So the log is streamed once into
``partitions`` parquet parts, each holding ALL events of a disjoint set of users, and every
per-user step runs on one part at a time. This module owns the order of the stages and the
:class:`Result` assembled from them; the stages, each a function of :mod:`data_prep.stages`
called by :func:`run` in this order, keep their parts in a :class:`data_prep.parts.Store`::

    (prep.prepare)    profile + check values (stream)    -> rows, time range, first bad line
    check_ratings     check ratings (stream, min_rating) -> first unreadable or missing rating
    split_by_user     select_events -> parts by user range (stream; one part: in memory)
    order_and_dedup   per part: order_and_dedup          -> dedup/<k>.parquet
    k_core_and_cut    global: k_core, split_cut over all parts (streaming counts)
    trim              per part: trim                     -> trim/<k>.parquet, counts
    (run)             global: item and feature codes by frequency
    encode            per part: encode -> append to sequences.parquet (parts in user order)
    _items_frame, _users_frame, _vocab                   -> items, users, meta.json vocab

A job with one part (``partitions=auto`` below ``EVENTS_PER_PART`` events) keeps its
intermediate frames in memory instead of scratch files; parts are ranges of the sorted distinct
user ids, so sequences.parquet is written in user order part by part, with no global sort (both
explained in :mod:`data_prep.parts`). The result is identical for any number of parts (tested).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from data_prep import schema, stages, steps
from data_prep.parts import Store
from data_prep.stages import Encoded, Stage

EVENTS_PER_PART = 10_000_000  # partitions=auto: about this many events per part (~1.2 GB)


@dataclass
class Result:
    """What the job computed besides sequences.parquet (written into the output folder)."""

    items: pl.DataFrame  # item, original_id, count[, category]
    users: pl.DataFrame  # user, original_id
    vocab: dict[str, list[str]]  # side feature -> values by code from 1
    lengths: pl.Series  # sequence length per user, in user order
    cut: int | None  # temporal split cut time
    partitions: int


def auto_partitions(setting: Any, rows: int) -> int:
    if setting in (None, "auto"):
        return max(1, math.ceil(rows / EVENTS_PER_PART))
    return int(setting)


def run(
    raw: pl.LazyFrame, cfg: Mapping[str, Any], rows: int, work: Path, out: Path, stage: Stage
) -> Result:
    """Run the job on the checked raw log; write ``out/sequences.parquet``.

    One function per stage of the module's diagram, in that order; each per-part stage hands
    its parts to the next through ``store`` and frees them as it goes.

    Args:
        raw: the reader's canonical columns (values already checked).
        rows: the raw log's row count (sizes ``partitions=auto``).
        work: an empty scratch folder (removed by the caller).
        out: the (temporary) output folder.
        stage: a context manager factory that reports progress of a named stage.
    """
    parts = auto_partitions(cfg["partitions"], rows)
    if cfg["min_rating"] is not None:  # only the job knows the threshold the check is for
        stages.check_ratings(raw, cfg, stage)
    store = Store(work, in_memory=parts == 1)
    present = stages.split_by_user(steps.select_events(raw, cfg), parts, rows, store, stage)
    if not present:
        return _empty(parts)
    stages.order_and_dedup(store, present, cfg["dedup"], stage)
    deduped = store.scan_all("dedup", present)
    users, items, cut = stages.k_core_and_cut(deduped, cfg, store.engine, stage)
    features = list(cfg["features"])
    sources = {n: schema.SIDE_FEATURE_SOURCES[n] for n in features if n != "gap"}
    counts = stages.trim(store, present, users, items, cfg, cut, sources, stage)
    item_codes = steps.frequency_codes(counts.items, steps.ITEM)
    codes = {
        name: steps.frequency_codes(counts.features[name], src) for name, src in sources.items()
    }
    encoded = stages.encode(
        store, present, counts.users, item_codes, features, codes, cut, out, stage
    )
    return Result(
        items=_items_frame(item_codes, encoded),
        users=_users_frame(counts.users),
        vocab=_vocab(features, sources, codes),
        lengths=encoded.lengths,
        cut=cut,
        partitions=parts,
    )


def _items_frame(item_codes: pl.DataFrame, encoded: Encoded) -> pl.DataFrame:
    """items.parquet: every item code with its original id, its count in the training part of
    the lists (0 when it occurs only in val/test targets) and, with the category feature,
    its most frequent category code (ties: the lower code)."""
    items = (
        item_codes.select(
            pl.col("code").alias(schema.ITEM), pl.col(steps.ITEM).alias(schema.ORIGINAL_ID)
        )
        .join(
            encoded.train_counts.group_by(schema.ITEM).agg(pl.col("len").sum()),
            on=schema.ITEM,
            how="left",
        )
        .with_columns(pl.col("len").fill_null(0).cast(pl.Int64).alias(schema.COUNT))
        .drop("len")
    )
    if encoded.item_categories is not None:
        top = (
            encoded.item_categories.group_by(schema.ITEM, "category")
            .agg(pl.col("len").sum())
            .sort([schema.ITEM, "len", "category"], descending=[False, True, False])
            .unique(schema.ITEM, keep="first", maintain_order=True)
            .select(schema.ITEM, "category")
        )
        items = items.join(top, on=schema.ITEM, how="left")
    return items.sort(schema.ITEM)


def _users_frame(part_users: Mapping[int, pl.Series]) -> pl.DataFrame:
    """users.parquet: user index -> original id; the parts' ascending ids, in part order, are
    all ids ascending, the order :func:`data_prep.stages.encode` numbered them in."""
    users = pl.concat(list(part_users.values())).to_frame(schema.ORIGINAL_ID)
    return users.with_row_index(schema.USER).with_columns(pl.col(schema.USER).cast(pl.Int64))


def _vocab(
    features: list[str], sources: Mapping[str, str], codes: Mapping[str, pl.DataFrame]
) -> dict[str, list[str]]:
    """meta.json's vocabularies, in the order of ``features``: each side feature's values by
    code from 1 (``gap``: its bucket labels)."""
    vocab = {name: codes[name][sources[name]].cast(pl.String).to_list() for name in sources}
    if "gap" in features:
        vocab["gap"] = steps.gap_labels()
    return {name: vocab[name] for name in features}


def _empty(parts: int) -> Result:
    return Result(
        items=pl.DataFrame(),
        users=pl.DataFrame(),
        vocab={},
        lengths=pl.Series([], dtype=pl.UInt32),
        cut=None,
        partitions=parts,
    )
