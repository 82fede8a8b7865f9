"""The prep job's per-part stages, one function each, in the order :func:`data_prep.job.run`
calls them (its module docstring draws the whole job); the first stage, which reads the log's
files, is :mod:`data_prep.input_tasks`'s.

Each stage is a map of one *task* per input file or per user part, run by an executor of
:mod:`data_prep.cluster` (in this process, or on a Dask cluster's workers), and, where the
job needs a figure over the whole log, a small reduction of the tasks' results here: the
k-core's counts, the temporal cut, the item and feature counts that codes are given by. A
task reads the previous stage's part from a :class:`data_prep.parts.Store`, runs steps of
:mod:`data_prep.steps` on it with the in-memory engine (``PER_PART``) and writes its own; what
it returns is small (counts, lengths). Tasks are module-level functions of picklable
arguments, so that a cluster can ship them, and a rerun task rewrites what it wrote.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from data_prep import schema, steps
from data_prep.parts import Store
from data_prep.schema import ROW
from data_prep.sort_key import sort_bounds

# one part's sort and list aggregation hold the part anyway; the in-memory engine sorts about
# twice as fast as the streaming one (polars 2.x's default)
PER_PART = "in-memory"
OUTPUT = {"compression": "zstd", "compression_level": 1}  # fast to write, as small as zstd 3
CUT_BUCKETS = 4_096  # the temporal cut's first pass: a histogram of this many time buckets

Stage = Callable[[str], AbstractContextManager]


# --- per part: time order and de-duplication --------------------------------------------


def _order_and_dedup_part(k: int, store: Store, dedup: str) -> None:
    frame = store.get_frame("raw", k)
    store.drop("raw", k)
    ordered = steps.order_and_dedup(frame.lazy(), dedup, sort_bounds(frame))
    del frame
    store.put("dedup", k, ordered.drop(ROW).collect(engine=PER_PART))


def order_and_dedup(store: Store, present: list[int], dedup: str, run: Any, stage: Stage) -> None:
    """Per part, ``raw`` -> ``dedup``: time order (ties by row) and de-duplication
    (:func:`data_prep.steps.order_and_dedup`), the sort that needs a user's whole history.

    The raw part is freed before the sorted one is made, so at most about two copies of one
    part are alive; the row number is dropped once the order it breaks ties for is fixed."""
    with stage("time order and de-duplication"):
        run.map(_order_and_dedup_part, present, store, dedup)


# --- global: the k-core -----------------------------------------------------------------


@dataclass(frozen=True)
class Core:
    """The k-core's members: per part, the users kept in round ``users_round`` (None: no user
    filter), and the kept ``items`` (None: no item filter)."""

    users_round: int | None
    items: pl.Series | None

    def users(self, store: Store, k: int) -> pl.Series | None:
        if self.users_round is None:
            return None
        return store.get_frame(_core_users(self.users_round), k)[steps.USER]

    def members(self, store: Store, k: int, name: str = "dedup") -> pl.LazyFrame:
        return steps.members(store.get(name, k), self.users(store, k), self.items)


def _core_users(round_: int) -> str:
    return f"core_users_{round_}"  # one name per round: a rerun task reads its own inputs


def _k_core_round(
    k: int, store: Store, round_: int, core: Core, min_user: int, min_item: int
) -> tuple[int, int, pl.DataFrame | None]:
    """Task: count part k's events of the current members; keep its users with >= min_user
    (stored for the next round); return (users counted, users kept, item counts)."""
    lf = core.members(store, k)
    queries = [lf.group_by(steps.USER).agg(pl.len())]
    if min_item > 1:
        queries.append(lf.group_by(steps.ITEM).agg(pl.len()))
    counted = pl.collect_all(queries, engine=PER_PART)
    user_counts, kept = counted[0], counted[0].height
    if min_user > 1:
        users = user_counts.filter(pl.col("len") >= min_user).select(steps.USER)
        store.put(_core_users(round_), k, users)
        kept = users.height
    return user_counts.height, kept, counted[1] if min_item > 1 else None


def k_core(
    store: Store, present: list[int], cfg: Mapping[str, Any], run: Any, stage: Stage
) -> Core:
    """The iterative k-core over all parts: every kept user has >= ``min_user_events`` events
    on kept items and every kept item >= ``min_item_events`` from kept users.

    Each round recounts both sides over the current members, one task per part (users are
    disjoint between parts, so a part decides its own users; item counts are summed here); it
    stops when a round removes nobody. A side whose bound is 1 is not filtered; with one side
    filtered, one round suffices (removing users never lowers another user's count)."""
    min_user, min_item = int(cfg["min_user_events"]), int(cfg["min_item_events"])
    core = Core(None, None)
    if min_user <= 1 and min_item <= 1:
        return core
    with stage("k-core filter"):
        for round_ in itertools.count():
            counted = run.map(_k_core_round, present, store, round_, core, min_user, min_item)
            users_stay = all(total == kept for total, kept, _ in counted)
            items, items_stay = None, True
            if min_item > 1:
                counts = pl.concat([c for *_, c in counted]).group_by(steps.ITEM).agg(pl.sum("len"))
                items = counts.filter(pl.col("len") >= min_item)[steps.ITEM].sort()
                items_stay = items.len() == counts.height
            core = Core(round_ if min_user > 1 else None, items)
            if (users_stay and items_stay) or min_user <= 1 or min_item <= 1:
                break
    return core


# --- global: the temporal split's cut ---------------------------------------------------


def _cut_histogram(k: int, store: Store, core: Core, low: int, width: int) -> pl.DataFrame:
    bucket = (pl.col(steps.TS) - low) // width
    return core.members(store, k).group_by(bucket.alias("bucket")).agg(pl.len()).collect()


def _cut_values(
    k: int, store: Store, core: Core, low: int, width: int, bucket: int
) -> pl.DataFrame:
    in_bucket = (pl.col(steps.TS) - low) // width == bucket
    return core.members(store, k).filter(in_bucket).group_by(steps.TS).agg(pl.len()).collect()


def split_cut(
    store: Store,
    present: list[int],
    core: Core,
    cfg: Mapping[str, Any],
    time_range: tuple[int, int],
    run: Any,
    stage: Stage,
) -> int | None:
    """The temporal split's cut: ``split_cut``, or the ``split_cut_quantile`` of the k-core
    members' timestamps (None for leave-one-out).

    Exactly Polars' ``quantile(q, "nearest")`` of all members, found in two passes that each
    return little per part: a histogram of ``CUT_BUCKETS`` time buckets over the log's time
    range locates the bucket of the quantile's rank, then that bucket's timestamp counts
    give the value."""
    if cfg["split"] != "temporal":
        return None
    if cfg["split_cut"] is not None:
        return int(cfg["split_cut"])
    low, high = time_range
    width = max(1, math.ceil((high - low + 1) / CUT_BUCKETS))
    with stage("temporal split cut"):
        histogram = _summed(run.map(_cut_histogram, present, store, core, low, width), "bucket")
        events = int(histogram["len"].sum())
        rank = math.floor((events - 1) * float(cfg["split_cut_quantile"]) + 0.5)  # "nearest"
        bucket, before = _at_rank(histogram, "bucket", rank)
        values = _summed(run.map(_cut_values, present, store, core, low, width, bucket), steps.TS)
        return int(_at_rank(values, steps.TS, rank - before)[0])


def _summed(frames: list[pl.DataFrame], key: str) -> pl.DataFrame:
    return pl.concat(frames).group_by(key).agg(pl.sum("len")).sort(key)


def _at_rank(counts: pl.DataFrame, key: str, rank: int) -> tuple[Any, int]:
    """The value of ``key`` at 0-based ``rank`` of the sorted values that ``counts`` counts,
    and how many values come before it."""
    ends = counts["len"].cum_sum()
    i = int(ends.search_sorted(rank, side="right"))
    return counts[key][i], int(ends[i - 1]) if i else 0


# --- per part: trim, and the counts that codes are given by -----------------------------


@dataclass
class PartCounts:
    """What :func:`_trim_part` counted in one part."""

    items: pl.DataFrame  # item_id, len
    features: dict[str, pl.DataFrame]  # side feature -> (raw value, len)
    users: int


def _trim_part(
    k: int,
    store: Store,
    core: Core,
    cfg: Mapping[str, Any],
    cut: int | None,
    sources: Mapping[str, str],
) -> PartCounts:
    trimmed = steps.trim(store.get("dedup", k), core.users(store, k), core.items, cfg, cut)
    store.put("trim", k, trimmed.collect(engine=PER_PART))
    store.drop("dedup", k)
    frame = store.get("trim", k)
    queries = [
        frame.group_by(steps.ITEM).agg(pl.len()),
        frame.select(pl.col(steps.USER).unique().sort()),
        *(frame.group_by(src).agg(pl.len()) for src in sources.values()),
    ]
    counted = pl.collect_all(queries, engine=PER_PART)
    store.put("users", k, counted[1])
    features = {
        name: counts.drop_nulls() for name, counts in zip(sources, counted[2:], strict=True)
    }
    return PartCounts(items=counted[0], features=features, users=counted[1].height)


@dataclass
class Counts:
    """What :func:`trim` counted over all parts, to give codes by global frequency."""

    items: pl.DataFrame  # item_id, len: per part, concatenated
    features: dict[str, pl.DataFrame]  # side feature -> (raw value, len) per part, concatenated
    users: list[int]  # users per part, in part order


def trim(
    store: Store,
    present: list[int],
    core: Core,
    cfg: Mapping[str, Any],
    cut: int | None,
    sources: Mapping[str, str],
    run: Any,
    stage: Stage,
) -> Counts:
    """Per part, ``dedup`` -> ``trim``: keep the k-core members, apply the temporal trim and
    the last ``max_len`` events (:func:`data_prep.steps.trim`); count the kept items, the
    values of the side features read from ``sources`` (name -> raw column) and the users
    (their original ids, ascending, go to the store's ``users`` part).

    Codes are given by frequency over all parts, so the counts are made here, one small
    aggregate per part, and the parts are encoded only once every count is in."""
    with stage("k-core members, split trim, truncation to max_len"):
        counted = run.map(_trim_part, present, store, core, cfg, cut, sources)
    return Counts(
        items=pl.concat([c.items for c in counted]),
        features={n: pl.concat([c.features[n] for c in counted]) for n in sources},
        users=[c.users for c in counted],
    )


# --- per part: codes and lists, then sequences.parquet ----------------------------------


@dataclass
class Encoded:
    """What :func:`encode` kept of the sequences it wrote, for items.parquet and meta.json."""

    lengths: pl.Series  # sequence length per user, in user order
    train_counts: pl.DataFrame  # item, len: training occurrences per part, concatenated
    item_categories: pl.DataFrame | None  # item, category, len per part; None without category


def _encode_part(
    k: int,
    store: Store,
    first_users: Mapping[int, int],
    item_codes: pl.DataFrame,
    features: list[str],
    codes: Mapping[str, pl.DataFrame],
    cut: int | None,
) -> Encoded:
    user_ids = store.get_frame("users", k)[steps.USER]
    seqs = steps.encode(
        store.get("trim", k), user_ids, first_users[k], item_codes, features, codes, cut
    ).collect(engine=PER_PART)
    store.drop("trim", k)
    store.put("sequences", k, seqs)
    return Encoded(
        lengths=seqs[schema.ITEMS].list.len(),
        train_counts=_train_counts(seqs),
        item_categories=_item_categories(seqs) if "category" in features else None,
    )


def encode(
    store: Store,
    present: list[int],
    counts: Counts,
    item_codes: pl.DataFrame,
    features: list[str],
    codes: Mapping[str, pl.DataFrame],
    cut: int | None,
    out: Path,
    run: Any,
    stage: Stage,
) -> Encoded:
    """Per part, ``trim`` -> ``sequences``: ids and side features as codes, split indices
    (:func:`data_prep.steps.encode`); then ``out/sequences.parquet``, the parts in order.

    Part k's users precede part k+1's, so user indices continue from the previous part and
    the parts are appended in order: the file is in user order with no global sort."""
    starts = [0, *itertools.accumulate(counts.users)][: len(present)]
    first_users = dict(zip(present, starts, strict=True))
    with stage("ids, side features and splits -> sequences.parquet"):
        encoded = run.map(
            _encode_part, present, store, first_users, item_codes, features, codes, cut
        )
        with _sequences_writer(out / schema.SEQUENCES_FILE, single=len(present) == 1) as write:
            for k in present:
                write(store.get_frame("sequences", k))
                store.drop("sequences", k)
    categories = [e.item_categories for e in encoded if e.item_categories is not None]
    return Encoded(
        lengths=pl.concat([e.lengths for e in encoded]),
        train_counts=pl.concat([e.train_counts for e in encoded]),
        item_categories=pl.concat(categories) if categories else None,
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
