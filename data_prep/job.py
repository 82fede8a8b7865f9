"""Run the steps of :mod:`data_prep.steps` over user partitions, so memory is bounded by the
largest partition instead of the log, in this process or on a cluster's workers.

Polars' streaming engine runs row-wise work and group-by counts in bounded memory, but a sort
or a list aggregation per user holds its whole input. So the log's files are streamed once
into ``partitions`` parquet parts, each holding ALL events of a disjoint set of users, and
every per-user step runs on one part at a time, as one task per part of an executor
(:mod:`data_prep.cluster`). This module owns the order of the stages and the :class:`Result`
assembled from them; the stages, each a function of :mod:`data_prep.stages` (the first, which
reads the files, of :mod:`data_prep.input_tasks`) called by :func:`run` in this order, keep
their parts in a :class:`data_prep.parts.Store`::

    (prep.prepare)    per file: hash, schema, value and rating checks -> rows, time range
    split_by_user     per file: select_events -> parts by user range (one part: in memory)
    order_and_dedup   per part: order_and_dedup          -> dedup/<k>.parquet
    k_core            rounds of per-part counts, summed here, until both bounds hold
    split_cut         temporal: per-part histograms of time, the quantile found here
    trim              per part: trim                     -> trim/<k>.parquet, counts
    (run)             global: item and feature codes by frequency
    encode            per part: encode -> sequences/<k>; appended to sequences.parquet in order
    _items_frame, _users_frame, _vocab                   -> items, users, meta.json vocab

A job with one part in this process (``partitions=auto`` below ``EVENTS_PER_PART`` events)
keeps its intermediate frames in memory instead of scratch files; parts are ranges of the
sorted distinct user ids, so sequences.parquet is written in user order part by part, with no
global sort (both explained in :mod:`data_prep.parts`). The result is identical for any number
of parts and any executor (tested).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from data_prep import input_tasks, schema, stages, steps
from data_prep.inputs import LogFile
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


def auto_partitions(setting: Any, rows: int, slots: int = 1) -> int:
    """``partitions``: a number as given; ``auto``: about ``EVENTS_PER_PART`` events per part,
    and at least one part per worker (``slots``)."""
    if setting in (None, "auto"):
        return max(1, math.ceil(rows / EVENTS_PER_PART), slots)
    return int(setting)


def run(
    files: Sequence[LogFile],
    cfg: Mapping[str, Any],
    rows: int,
    time_range: tuple[int, int] | None,
    work: Path,
    out: Path,
    stage: Stage,
    executor: Any,
) -> Result:
    """Run the job on the checked log; write ``out/sequences.parquet``.

    One function per stage of the module's diagram, in that order; each per-part stage hands
    its parts to the next through ``store`` and frees them as it goes.

    Args:
        files: the log's files (values already checked).
        rows: the log's row count (sizes ``partitions=auto``).
        time_range: the log's first and last timestamps (None without a clock).
        work: an empty scratch folder (removed by the caller); on a cluster, on storage that
            every worker sees.
        out: the (temporary) output folder.
        stage: a context manager factory that reports progress of a named stage.
        executor: runs the stages' tasks (:mod:`data_prep.cluster`).
    """
    parts = auto_partitions(cfg["partitions"], rows, executor.slots)
    store = Store(work, in_memory=parts == 1 and executor.shares_memory)
    present = input_tasks.split_by_user(files, cfg, parts, rows, store, executor, stage)
    if not present:
        return _empty(parts)
    stages.order_and_dedup(store, present, cfg["dedup"], executor, stage)
    core = stages.k_core(store, present, cfg, executor, stage)
    cut = stages.split_cut(store, present, core, cfg, time_range, executor, stage)
    features = list(cfg["features"])
    sources = {n: schema.SIDE_FEATURE_SOURCES[n] for n in features if n != "gap"}
    counts = stages.trim(store, present, core, cfg, cut, sources, executor, stage)
    item_codes = steps.frequency_codes(counts.items, steps.ITEM)
    codes = {
        name: steps.frequency_codes(counts.features[name], src) for name, src in sources.items()
    }
    encoded = stages.encode(
        store, present, counts, item_codes, features, codes, cut, out, executor, stage
    )
    return Result(
        items=_items_frame(item_codes, encoded),
        users=_users_frame([store.get_frame("users", k) for k in present]),
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


def _users_frame(part_users: list[pl.DataFrame]) -> pl.DataFrame:
    """users.parquet: user index -> original id; the parts' ascending ids, in part order, are
    all ids ascending, the order :func:`data_prep.stages.encode` numbered them in."""
    users = pl.concat(part_users).select(pl.col(steps.USER).alias(schema.ORIGINAL_ID))
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
