"""The prep job's stages, one function each, in the order :func:`data_prep.job.run` calls them
(its module docstring draws the whole job). Each runs steps of :mod:`data_prep.steps` over the
user parts of a :class:`data_prep.parts.Store`, reading the previous stage's parts and handing
its own on; the last one writes ``sequences.parquet`` part by part.

They sit apart from :func:`~data_prep.job.run`, so that the orchestration reads as the list of
stages, and from :mod:`data_prep.parts`, so that what a stage computes is not mixed with where
parts are kept. Per-part stages run the in-memory engine (``PER_PART``) on one part at a time;
global stages run counts over all parts, which stream in bounded memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from data_prep import checks, schema, steps
from data_prep.parts import PART, Store, partition
from data_prep.schema import ROW
from data_prep.sort_key import sort_bounds

# one part's sort and list aggregation hold the part anyway; the in-memory engine sorts about
# twice as fast as the streaming one (polars 2.x's default)
PER_PART = "in-memory"
OUTPUT = {"compression": "zstd", "compression_level": 1}  # fast to write, as small as zstd 3

Stage = Callable[[str], AbstractContextManager]


def check_ratings(raw: pl.LazyFrame, cfg: Mapping[str, Any], stage: Stage) -> None:
    """Before ``min_rating`` filters: refuse unreadable (or, without ``null_ids=drop``,
    missing) ratings, naming the first line (:func:`data_prep.checks.check_ratings`); the
    filter alone would drop them silently."""
    with stage("checking ratings"):
        checks.check_ratings(
            raw, Path(cfg["input"]), cfg["format"], cfg["min_rating"], cfg["null_ids"] == "drop"
        )


def split_by_user(
    events: pl.LazyFrame, parts: int, rows: int, store: Store, stage: Stage
) -> list[int]:
    """Run the row-wise filters (``events``, streamed once) into ``store``'s ``raw`` parts,
    each holding all events of a disjoint user range, and return the part numbers that hold
    any events (ranges can end up empty after the filters).

    One part is read into memory (nothing to bound); several are sunk to scratch files by
    :func:`data_prep.parts.partition`, so no later stage holds more than one part."""
    if parts == 1:
        with stage(f"reading {rows:,} events"):
            store.put("raw", 0, events.collect(engine=PER_PART))
        return [0] if store.get_frame("raw", 0).height else []
    with stage(f"partitioning {rows:,} events into {parts} user part(s)"):
        partition(events, parts, store.work / "raw")
    return [k for k in range(parts) if (store.work / "raw" / f"{PART}={k}").is_dir()]


def order_and_dedup(store: Store, present: list[int], dedup: str, stage: Stage) -> None:
    """Per part, ``raw`` -> ``dedup``: time order (ties by row) and de-duplication
    (:func:`data_prep.steps.order_and_dedup`), the sort that needs a user's whole history.

    The raw part is freed before the sorted one is made, so at most about two copies of one
    part are alive; the row number is dropped once the order it breaks ties for is fixed."""
    with stage("time order and de-duplication"):
        for k in present:
            frame = store.get_frame("raw", k)
            store.drop("raw", k)
            ordered = steps.order_and_dedup(frame.lazy(), dedup, sort_bounds(frame))
            del frame
            store.put("dedup", k, ordered.drop(ROW).collect(engine=PER_PART))


def k_core_and_cut(
    deduped: pl.LazyFrame, cfg: Mapping[str, Any], engine: str, stage: Stage
) -> tuple[pl.Series | None, pl.Series | None, int | None]:
    """The global filters over all ``dedup`` parts: the k-core's surviving ``users`` and
    ``items`` (:func:`data_prep.steps.k_core`; None for a side whose bound is 1) and the
    temporal split's ``cut`` (None for leave-one-out).

    Both need counts over every part, which stream in bounded memory; the quantile cut is
    taken over the k-core members only, the events that the lists will hold."""
    with stage("k-core filter"):
        users, items = steps.k_core(
            deduped, int(cfg["min_user_events"]), int(cfg["min_item_events"]), engine
        )
    cut = None
    if cfg["split"] == "temporal":
        cut = cfg["split_cut"]
        if cut is None:
            kept = steps.members(deduped, users, items)
            cut = steps.split_cut(kept, float(cfg["split_cut_quantile"]))
    return users, items, cut


@dataclass
class Counts:
    """What :func:`trim` counted over all parts, to give codes by global frequency."""

    items: pl.DataFrame  # item_id, len: per part, concatenated
    features: dict[str, pl.DataFrame]  # side feature -> (raw value, len) per part, concatenated
    users: dict[int, pl.Series]  # part -> its original user ids, ascending


def trim(
    store: Store,
    present: list[int],
    users: pl.Series | None,
    items: pl.Series | None,
    cfg: Mapping[str, Any],
    cut: int | None,
    sources: Mapping[str, str],
    stage: Stage,
) -> Counts:
    """Per part, ``dedup`` -> ``trim``: keep the k-core members, apply the temporal trim and
    the last ``max_len`` events (:func:`data_prep.steps.trim`); count the kept items, the
    values of the side features read from ``sources`` (name -> raw column) and the users.

    Codes are given by frequency over all parts, so the counts are made here, one small
    aggregate per part, and the parts are encoded only once every count is in."""
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
    return Counts(
        items=pl.concat(item_counts),
        features={name: pl.concat(frames) for name, frames in feature_counts.items()},
        users=part_users,
    )


@dataclass
class Encoded:
    """What :func:`encode` kept of the sequences it wrote, for items.parquet and meta.json."""

    lengths: pl.Series  # sequence length per user, in user order
    train_counts: pl.DataFrame  # item, len: training occurrences per part, concatenated
    item_categories: pl.DataFrame | None  # item, category, len per part; None without category


def encode(
    store: Store,
    present: list[int],
    part_users: Mapping[int, pl.Series],
    item_codes: pl.DataFrame,
    features: list[str],
    codes: Mapping[str, pl.DataFrame],
    cut: int | None,
    out: Path,
    stage: Stage,
) -> Encoded:
    """Per part, ``trim`` -> rows of ``out/sequences.parquet``: ids and side features as codes,
    split indices (:func:`data_prep.steps.encode`); keep each part's lengths, training item
    counts and item categories.

    Part k's users precede part k+1's, so user indices continue from the previous part and
    the parts are appended in order: the file is in user order with no global sort."""
    train_counts, item_categories, lengths = [], [], []
    first_user = 0
    with (
        stage("ids, side features and splits -> sequences.parquet"),
        _sequences_writer(out / schema.SEQUENCES_FILE, single=len(present) == 1) as write,
    ):
        for k in present:
            seqs = steps.encode(
                store.get("trim", k), part_users[k], first_user, item_codes, features, codes, cut
            ).collect(engine=PER_PART)
            store.drop("trim", k)
            first_user += seqs.height
            write(seqs)
            lengths.append(seqs[schema.ITEMS].list.len())
            train_counts.append(_train_counts(seqs))
            if "category" in features:
                item_categories.append(_item_categories(seqs))
    return Encoded(
        lengths=pl.concat(lengths),
        train_counts=pl.concat(train_counts),
        item_categories=pl.concat(item_categories) if item_categories else None,
    )


@contextmanager
def _sequences_writer(path: Path, single: bool) -> Iterator[Callable[[pl.DataFrame], None]]:
    """A function that writes the parts of ``sequences.parquet`` in order: a single part as
    Polars writes it, several as row groups of one pyarrow writer (opened with the first
    part's schema, closed on exit), so no more than one part is held."""
    writer = None

    def write(seqs: pl.DataFrame) -> None:
        nonlocal writer
        if single:
            seqs.write_parquet(path, **OUTPUT)
            return
        table = seqs.to_arrow()
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema, **_arrow(OUTPUT))
        writer.write_table(table)

    try:
        yield write
    finally:
        if writer is not None:
            writer.close()


def _arrow(options: dict[str, Any]) -> dict[str, Any]:
    """Polars ``write_parquet`` options as pyarrow ``ParquetWriter`` options."""
    return {
        "compression": options["compression"],
        "compression_level": options.get("compression_level"),
    }


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
