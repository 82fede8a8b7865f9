"""Run the steps of :mod:`data_prep.steps` over user partitions, so memory is bounded by the
largest partition instead of the log.

Polars' streaming engine runs row-wise work and group-by counts in bounded memory, but a sort
or a list aggregation per user holds its whole input. So the log is streamed once into
``partitions`` parquet parts, each holding ALL events of a disjoint set of users, and every
per-user step runs on one part at a time::

    profile + check values (stream)            -> rows, time range, first bad line
    check ratings (stream, with min_rating)    -> first unreadable or missing rating
    select_events -> sink parts by user range  (stream; parts = 1 writes a single part)
    per part:  order_and_dedup                 -> dedup/<k>.parquet
    global:    k_core, split_cut over all parts (streaming counts)
    per part:  trim                            -> trim/<k>.parquet, item/feature/user counts
    global:    item codes (by frequency), feature codes, user index offsets
    per part:  encode -> append to sequences.parquet (parts are in user order)

A job with one part (``partitions=auto`` below ``EVENTS_PER_PART`` events) keeps its
intermediate frames in memory instead of scratch files: the log is read once, sorted once and
never written back (the bounded-memory argument is moot for a log that fits in one part).

Parts are ranges of the sorted distinct user ids (cut at every U/parts-th id) rather than a
hash of it: equally balanced in users, and because user indices follow the original-id
order, part k's users precede part k+1's, so sequences.parquet is written in user order part
by part, with no global sort. The result is identical for any number of parts (tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from data_prep import checks, schema, steps
from data_prep.formats import ROW

EVENTS_PER_PART = 10_000_000  # partitions=auto: about this many events per part (~1.2 GB)
PART = "_part"
SCRATCH = {"compression": "lz4"}  # scratch parts are read once or twice: favour speed
# one part's sort and list aggregation hold the part anyway; the in-memory engine sorts about
# twice as fast as the streaming one (polars 2.x's default)
PER_PART = "in-memory"
OUTPUT = {"compression": "zstd", "compression_level": 1}  # fast to write, as small as zstd 3

Stage = Callable[[str], AbstractContextManager]


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

    Args:
        raw: the reader's canonical columns (values already checked).
        rows: the raw log's row count (sizes ``partitions=auto``).
        work: an empty scratch folder (removed by the caller).
        out: the (temporary) output folder.
        stage: a context manager factory that reports progress of a named stage.
    """
    parts = auto_partitions(cfg["partitions"], rows)
    if cfg["min_rating"] is not None:  # only the job knows the threshold the check is for
        with stage("checking ratings"):
            checks.check_ratings(
                raw, Path(cfg["input"]), cfg["format"], cfg["min_rating"], cfg["null_ids"] == "drop"
            )
    events = steps.select_events(raw, cfg)
    store = _Store(work, in_memory=parts == 1)
    if parts == 1:
        with stage(f"reading {rows:,} events"):
            store.put("raw", 0, events.collect(engine=PER_PART))
        present = [0] if store.get_frame("raw", 0).height else []
    else:
        with stage(f"partitioning {rows:,} events into {parts} user part(s)"):
            _partition(events, parts, work / "raw")
        present = [k for k in range(parts) if (work / "raw" / f"{PART}={k}").is_dir()]
    if not present:
        return _empty(parts)

    with stage("time order and de-duplication"):
        for k in present:
            frame = store.get_frame("raw", k)
            store.drop("raw", k)
            ordered = steps.order_and_dedup(frame.lazy(), cfg["dedup"], steps.sort_bounds(frame))
            del frame
            store.put("dedup", k, ordered.drop(ROW).collect(engine=PER_PART))
    deduped = store.scan_all("dedup", present)
    with stage("k-core filter"):
        users, items = steps.k_core(
            deduped, int(cfg["min_user_events"]), int(cfg["min_item_events"]), store.engine
        )
    cut = None
    if cfg["split"] == "temporal":
        cut = cfg["split_cut"]
        if cut is None:
            kept = steps.members(deduped, users, items)
            cut = steps.split_cut(kept, float(cfg["split_cut_quantile"]))

    features = list(cfg["features"])
    sources = {n: schema.SIDE_FEATURE_SOURCES[n] for n in features if n != "gap"}
    item_counts, feature_counts, part_users = [], {n: [] for n in sources}, {}
    with stage("k-core members, split trim, truncation to max_len"):
        for k in present:
            trimmed = steps.trim(store.get("dedup", k), users, items, cfg, cut)
            store.put("trim", k, trimmed.collect(engine=PER_PART))
            store.drop("dedup", k)
            frame = store.get("trim", k)
            queries = [
                frame.group_by(steps.ITEM).agg(pl.len()),
                frame.select(pl.col(steps.USER).unique().sort()),
                *(frame.group_by(src).agg(pl.len()) for src in sources.values()),
            ]
            counted = pl.collect_all(queries, engine=PER_PART)
            item_counts.append(counted[0])
            part_users[k] = counted[1][steps.USER]
            for name, frame_counts in zip(sources, counted[2:], strict=True):
                feature_counts[name].append(frame_counts.drop_nulls())

    item_codes = steps.frequency_codes(pl.concat(item_counts), steps.ITEM)
    codes = {
        name: steps.frequency_codes(pl.concat(feature_counts[name]), src)
        for name, src in sources.items()
    }
    with stage("ids, side features and splits -> sequences.parquet"):
        train_counts, item_categories, lengths = [], [], []
        first_user = 0
        writer = None
        try:
            for k in present:
                seqs = steps.encode(
                    store.get("trim", k),
                    part_users[k],
                    first_user,
                    item_codes,
                    features,
                    codes,
                    cut,
                ).collect(engine=PER_PART)
                store.drop("trim", k)
                first_user += seqs.height
                if len(present) == 1:
                    seqs.write_parquet(out / schema.SEQUENCES_FILE, **OUTPUT)
                else:
                    table = seqs.to_arrow()
                    if writer is None:
                        writer = pq.ParquetWriter(
                            out / schema.SEQUENCES_FILE, table.schema, **_arrow(OUTPUT)
                        )
                    writer.write_table(table)
                lengths.append(seqs[schema.ITEMS].list.len())
                train_counts.append(_train_counts(seqs))
                if "category" in features:
                    item_categories.append(_item_categories(seqs))
        finally:
            if writer is not None:
                writer.close()

    items_frame = (
        item_codes.select(
            pl.col("code").alias(schema.ITEM), pl.col(steps.ITEM).alias(schema.ORIGINAL_ID)
        )
        .join(
            pl.concat(train_counts).group_by(schema.ITEM).agg(pl.col("len").sum()),
            on=schema.ITEM,
            how="left",
        )
        .with_columns(pl.col("len").fill_null(0).cast(pl.Int64).alias(schema.COUNT))
        .drop("len")
    )
    if item_categories:
        top = (
            pl.concat(item_categories)
            .group_by(schema.ITEM, "category")
            .agg(pl.col("len").sum())
            .sort([schema.ITEM, "len", "category"], descending=[False, True, False])
            .unique(schema.ITEM, keep="first", maintain_order=True)
            .select(schema.ITEM, "category")
        )
        items_frame = items_frame.join(top, on=schema.ITEM, how="left")
    users_frame = pl.concat(list(part_users.values())).to_frame(schema.ORIGINAL_ID)
    users_frame = users_frame.with_row_index(schema.USER).with_columns(
        pl.col(schema.USER).cast(pl.Int64)
    )
    vocab = {name: codes[name][sources[name]].cast(pl.String).to_list() for name in sources}
    if "gap" in features:
        vocab["gap"] = steps.gap_labels()
    vocab = {name: vocab[name] for name in features}
    return Result(
        items=items_frame.sort(schema.ITEM),
        users=users_frame,
        vocab=vocab,
        lengths=pl.concat(lengths),
        cut=cut,
        partitions=parts,
    )


class _Store:
    """Per-part intermediate frames by stage name: in memory, or scratch parquet under ``work``
    (``raw`` parts come from :func:`_partition`'s folders)."""

    def __init__(self, work: Path, in_memory: bool):
        self.work, self.in_memory = work, in_memory
        self.frames: dict[tuple[str, int], pl.DataFrame] = {}
        # queries over all parts: streamed from scratch files in bounded memory, else in memory
        self.engine = "in-memory" if in_memory else "streaming"

    def _path(self, name: str, k: int) -> Path:
        if name == "raw":
            return self.work / "raw" / f"{PART}={k}"
        return self.work / name / f"{k}.parquet"

    def put(self, name: str, k: int, frame: pl.DataFrame) -> None:
        if self.in_memory:
            self.frames[name, k] = frame
        else:
            path = self._path(name, k)
            path.parent.mkdir(parents=True, exist_ok=True)
            frame.write_parquet(path, **SCRATCH)

    def get(self, name: str, k: int) -> pl.LazyFrame:
        if self.in_memory:
            return self.frames[name, k].lazy()
        return _scan(self._path(name, k))

    def get_frame(self, name: str, k: int) -> pl.DataFrame:
        if self.in_memory:
            return self.frames[name, k]
        return self.get(name, k).collect()

    def scan_all(self, name: str, parts: list[int]) -> pl.LazyFrame:
        if self.in_memory:
            return pl.concat([self.frames[name, k] for k in parts], rechunk=False).lazy()
        return pl.scan_parquet([self._path(name, k) for k in parts])

    def drop(self, name: str, k: int) -> None:
        """Free a part that later stages no longer read (scratch files stay until the end)."""
        self.frames.pop((name, k), None)


def _arrow(options: dict[str, Any]) -> dict[str, Any]:
    """Polars ``write_parquet`` options as pyarrow ``ParquetWriter`` options."""
    return {
        "compression": options["compression"],
        "compression_level": options.get("compression_level"),
    }


def _scan(path: Path) -> pl.LazyFrame:
    return pl.scan_parquet(path / "*.parquet" if path.is_dir() else path)


def _partition(events: pl.LazyFrame, parts: int, folder: Path) -> None:
    """Stream the events into parts ``0..parts-1`` by ranges of the sorted distinct user ids."""
    if parts == 1:
        events.with_columns(pl.lit(0).alias(PART)).sink_parquet(
            pl.PartitionBy(folder, key=PART, include_key=False), mkdir=True, **SCRATCH
        )
        return
    distinct = (
        events.select(pl.col(steps.USER).unique()).sort(steps.USER).collect(engine="streaming")
    )[steps.USER]
    bounds = distinct.gather([i * distinct.len() // parts for i in range(1, parts)])
    part = pl.lit(bounds).search_sorted(pl.col(steps.USER), side="right")
    events.with_columns(part.alias(PART)).sink_parquet(
        pl.PartitionBy(folder, key=PART, include_key=False), mkdir=True, **SCRATCH
    )


def _train_counts(seqs: pl.DataFrame) -> pl.DataFrame:
    """Item occurrences in the training part of each list (``items[:train_end]``)."""
    return (
        seqs.select(pl.col(schema.ITEMS).list.slice(0, steps.train_end()).alias(schema.ITEM))
        .explode(schema.ITEM)
        .drop_nulls()
        .group_by(schema.ITEM)
        .agg(pl.len())
    )


def _item_categories(seqs: pl.DataFrame) -> pl.DataFrame:
    return (
        seqs.select(pl.col(schema.ITEMS).alias(schema.ITEM), "category")
        .explode([schema.ITEM, "category"])
        .group_by(schema.ITEM, "category")
        .agg(pl.len())
    )


def _empty(parts: int) -> Result:
    return Result(
        items=pl.DataFrame(),
        users=pl.DataFrame(),
        vocab={},
        lengths=pl.Series([], dtype=pl.UInt32),
        cut=None,
        partitions=parts,
    )
