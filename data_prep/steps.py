"""The prep job's steps as lazy Polars transforms (expressions only, no loops over rows).

Each step says whether it is *row-wise* (streamable over the whole log), *per user* (needs all
of a user's events: run on one user partition at a time, see :mod:`data_prep.job`) or *global*
(over small aggregates of every partition; the k-core's rounds and the temporal cut are such
reductions too, in :mod:`data_prep.stages`)::

    select_events    row-wise   row number, missing ids, event-type filter, rating threshold,
                                time window
    order_and_dedup  per user   time order (timestamp, then row), de-duplication
    members          per user   the events of the k-core's users and items
    trim             per user   k-core members, time-gap codes, temporal trim, last max_len
    frequency_codes  global     codes by descending count
    encode           per user   ids and side-feature codes, one row of parallel lists per user
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import polars as pl

from data_prep import schema
from data_prep.schema import ROW
from data_prep.sort_key import user_time_key

USER, ITEM, TS = schema.RAW_USER, schema.RAW_ITEM, schema.RAW_TIMESTAMP
SECONDS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
GAP_BUCKETS = 33  # log2-second buckets: 0 s .. ~136 years


def select_events(raw: pl.LazyFrame, cfg: Mapping[str, Any], first_row: int = 0) -> pl.LazyFrame:
    """Row-wise filters; numbers rows first (from ``first_row``, where this file starts in the
    log's row order) so ties keep the original file order."""
    lf = raw.with_row_index(ROW, offset=first_row)
    if cfg["null_ids"] == "drop":
        lf = lf.drop_nulls([USER, ITEM, TS])
    if cfg["event_types"]:
        keep = [str(v) for v in cfg["event_types"]]
        lf = lf.filter(pl.col(schema.RAW_EVENT).cast(pl.String).is_in(keep))
    if cfg["min_rating"] is not None:
        # a missing rating is null, and null never passes (checks.check_ratings ran first)
        value = numbers(schema.RAW_RATING, raw.collect_schema()[schema.RAW_RATING]).value
        lf = lf.filter(value >= float(cfg["min_rating"]))
    if cfg["start_time"] is not None:
        lf = lf.filter(pl.col(TS) >= cfg["start_time"])
    if cfg["end_time"] is not None:
        lf = lf.filter(pl.col(TS) < cfg["end_time"])
    return lf


class Numbers(NamedTuple):
    """A column read as numbers (see :func:`numbers`)."""

    value: pl.Expr  # Float64; null where missing or unreadable
    missing: pl.Expr  # null, empty or whitespace text, NaN
    unreadable: pl.Expr  # present but not a finite number: "abc", inf


def numbers(column: str, dtype: pl.DataType) -> Numbers:
    """The values of ``column`` (of ``dtype``) as numbers: numbers as they are, text parsed as
    a number; the log's ratings (``min_rating``) and an item table's numeric columns.

    NaN is missing, like null: ``NaN >= 4`` is true in Polars' total order, so a NaN rating
    would pass every threshold if it were kept as a number.

    Raises:
        TypeError: ``dtype`` holds no numbers (booleans, lists, ...).
    """
    col = pl.col(column)
    if dtype.is_numeric():
        number = col.cast(pl.Float64)
        missing = number.is_null() | number.is_nan()
    elif isinstance(dtype, (pl.String, pl.Categorical, pl.Enum, pl.Null)):
        text = col.cast(pl.String).str.strip_chars()
        number = text.cast(pl.Float64, strict=False)
        missing = text.is_null() | (text == "") | number.is_nan().fill_null(False)
    else:
        raise TypeError(f"a {dtype} column holds no numbers")
    unreadable = ~missing & (number.is_null() | number.is_infinite())
    return Numbers(pl.when(~missing & ~unreadable).then(number), missing, unreadable)


def order_and_dedup(
    lf: pl.LazyFrame, dedup: str, bounds: Mapping[str, Any] | None = None
) -> pl.LazyFrame:
    """Per user: time order with deterministic ties, then drop repeats.

    ``consecutive`` drops an event whose item equals the user's previous item; ``all`` keeps
    only the first occurrence of each (user, item). ``bounds`` (see
    :func:`data_prep.sort_key.sort_bounds`) lets the sort use one packed (user, timestamp) key
    instead of two columns.
    """
    key = user_time_key(bounds) if bounds is not None else None
    # ROW is unique: no stable sort needed (it is slower)
    lf = lf.sort([USER, TS, ROW]) if key is None else lf.sort([key, ROW])
    if dedup == "consecutive":
        new_user = pl.col(USER).ne_missing(pl.col(USER).shift(1))
        lf = lf.filter(new_user | pl.col(ITEM).ne_missing(pl.col(ITEM).shift(1)))
    elif dedup == "all":
        lf = lf.filter(pl.struct(USER, ITEM).is_first_distinct())
    return lf


def members(lf: pl.LazyFrame, users: pl.Series | None, items: pl.Series | None) -> pl.LazyFrame:
    """Events of the given users on the given items (None: no filter on that side)."""
    keep = [
        pl.col(key).is_in(values.implode())
        for key, values in ((USER, users), (ITEM, items))
        if values is not None
    ]
    return lf.filter(*keep) if keep else lf


def trim(
    lf: pl.LazyFrame,
    users: pl.Series | None,
    items: pl.Series | None,
    cfg: Mapping[str, Any],
    cut: int | None,
) -> pl.LazyFrame:
    """Per user, on events sorted by user and time (:func:`order_and_dedup`): keep k-core
    members, code time gaps, apply the temporal split's trim (see :mod:`data_prep.schema`),
    keep the most recent ``max_len``."""
    lf = members(lf, users, items)
    if "gap" in cfg["side_features"]:
        lf = lf.with_columns(gap_code(cfg["format"].get("timestamp_unit", "s")).alias("_gap"))
    if cut is not None:
        at_or_after = (pl.col(TS) >= cut).cum_sum().over(USER)
        lf = lf.filter(
            (at_or_after == 0) | ((at_or_after == 1) & (pl.col(TS) >= cut)),
            (pl.col(TS) < cut).any().over(USER),
        )
    # rows are grouped by user (sorted): a row's distance to its user's last row comes from
    # the run ends, linear scans instead of two per-user windows (about 5x faster)
    row = pl.int_range(pl.len(), dtype=pl.Int64)
    last = pl.when(pl.col(USER).ne_missing(pl.col(USER).shift(-1))).then(row).backward_fill()
    return lf.filter(last - row < int(cfg["max_len"]))


def gap_code(unit: str) -> pl.Expr:
    """1 for a user's first event, else 2 + floor(log2(seconds since the previous + 1))."""
    first = pl.col(USER).ne_missing(pl.col(USER).shift(1))
    # every row is computed before `when` picks: a user's first row differs from the previous
    # user's last, possibly negatively, so clip before the log (log2 of < 1 would be NaN)
    seconds = ((pl.col(TS) - pl.col(TS).shift(1)) // SECONDS[unit]).clip(lower_bound=0)
    bucket = (seconds.cast(pl.Float64) + 1).log(2).floor().cast(pl.Int64)
    return pl.when(first).then(1).otherwise(2 + bucket.clip(0, GAP_BUCKETS - 1))


def gap_labels() -> list[str]:
    """Vocabulary of the gap codes from 1: ``first``, then each bucket's range in seconds."""
    labels = ["first"]
    for b in range(GAP_BUCKETS):
        lo, hi = 2**b - 1, 2 ** (b + 1) - 1
        labels.append(f"{lo}s" if hi - lo == 1 else f"{lo}-{hi - 1}s")
    return labels


def frequency_codes(counts: pl.DataFrame, key: str, offset: int = schema.PAD + 1) -> pl.DataFrame:
    """Codes ``offset..`` by descending count, ties by value: (key, code, count)."""
    return (
        counts.group_by(key)
        .agg(pl.col("len").sum())
        .sort(["len", key], descending=[True, False])
        .with_row_index("code", offset=offset)
        .select(key, pl.col("code").cast(pl.Int64), pl.col("len").alias(schema.COUNT))
    )


def encode(
    lf: pl.LazyFrame,
    user_ids: pl.Series,
    first_user: int,
    item_codes: pl.DataFrame,
    features: list[str],
    feature_codes: Mapping[str, pl.DataFrame],
    cut: int | None,
) -> pl.LazyFrame:
    """Per user partition: map ids and side features to codes, one row of lists per user,
    plus the split indices (leave-one-out when ``cut`` is None, else temporal).

    ``user_ids`` are the partition's original user ids in ascending order; they get indices
    ``first_user..``; rows of ``lf`` are time ordered per user, so list order is time order.
    ``features`` are the side-feature lists to build, in output order; ``gap`` comes from the
    ``_gap`` column made by :func:`trim`, the others through ``feature_codes`` (raw value ->
    code; unknown/null -> PAD).
    """
    index = pl.int_range(first_user, first_user + user_ids.len(), dtype=pl.Int64, eager=True)
    mapped = [
        pl.col(USER).replace_strict(user_ids, index, return_dtype=pl.Int64).alias(schema.USER),
        pl.col(ITEM)
        .replace_strict(item_codes[ITEM], item_codes["code"], return_dtype=pl.Int64)
        .alias(schema.ITEM),
    ]
    for name in features:
        if name == "gap":
            mapped.append(pl.col("_gap").alias(name))
            continue
        codes = feature_codes[name]
        src = codes.columns[0]
        mapped.append(
            pl.col(src)
            .replace_strict(codes[src], codes["code"], default=schema.PAD, return_dtype=pl.Int64)
            .alias(name)
        )
    n = pl.col(schema.ITEMS).list.len()
    if cut is None:
        val, test = pl.when(n >= 3).then(n - 2), pl.when(n >= 2).then(n - 1)
    else:
        has_test = pl.col(schema.TIMESTAMPS).list.last() >= cut
        last_before = pl.when(has_test).then(n - 2).otherwise(n - 1)
        val = pl.when(last_before >= 1).then(last_before)
        test = pl.when(has_test & (n >= 2)).then(n - 1)
    return (
        lf.select(*mapped, TS)
        .group_by(schema.USER, maintain_order=True)
        .agg(
            pl.col(schema.ITEM).alias(schema.ITEMS),
            pl.col(TS).alias(schema.TIMESTAMPS),
            *(pl.col(name) for name in features),
        )
        .with_columns(
            val.cast(pl.Int64).alias(schema.VAL_INDEX),
            test.cast(pl.Int64).alias(schema.TEST_INDEX),
        )
        .select(
            schema.USER,
            schema.ITEMS,
            schema.TIMESTAMPS,
            schema.VAL_INDEX,
            schema.TEST_INDEX,
            *features,
        )
        .sort(schema.USER)
    )


def train_end() -> pl.Expr:
    """Exclusive end of the training events: the validation target, else the test target."""
    return pl.coalesce(schema.VAL_INDEX, schema.TEST_INDEX, pl.col(schema.ITEMS).list.len())
