"""recsys-prep on the real datasets in shared/data: published counts and step semantics.

Each dataset is prepared once per module; with k-core off (``min_user_events=1``) and no
truncation, the counts must equal the published ones (data README / the papers).
"""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data_prep import prepare, schema

pytestmark = pytest.mark.shared_data

NO_FILTER = {"min_user_events": 1, "max_len": 100_000}
# file, format, (users, items, events)
PUBLISHED = {
    "sasrec_video": ("sasrec/Video.txt", "sasrec_txt", (31_013, 23_715, 287_107)),
    "bert4rec_beauty": ("bert4rec/beauty.txt", "sasrec_txt", (40_226, 54_542, 353_962)),
    "s3rec_beauty": ("s3rec/Beauty.txt", "s3rec_txt", (22_363, 12_101, 198_502)),
    "s3rec_lastfm": ("s3rec/LastFM.txt", "s3rec_txt", (1_090, 3_646, 52_551)),
    "ml100k": ("movielens-100k/u.data", "movielens_100k", (943, 1_682, 100_000)),
    "ml1m_part": (
        "movielens-1m/ratings_users0001-2999.dat.gz",
        "movielens_dat",
        (2_999, 3_615, 487_650),
    ),
    "ml_latest_small": (
        "movielens-latest-small/ratings.csv",
        "movielens_csv",
        (610, 9_724, 100_836),
    ),
    "taobao": ("taobao/UserBehavior_head_814users.csv", "taobao", (814, 55_233, 84_287)),
    "diginetica": ("diginetica/sample_train-item-views.csv", "diginetica", (2_986, 7_139, 12_391)),
}


@pytest.fixture(scope="module")
def prepared(shared_data, tmp_path_factory):
    """Prepare a dataset once per module (cached by key and extra options)."""
    cache = {}

    def get(key: str, **options):
        ident = (key, tuple(sorted(options.items(), key=str)))
        if ident not in cache:
            file, fmt, _ = PUBLISHED[key]
            out = tmp_path_factory.mktemp(key)
            meta = prepare(
                {"input": shared_data / file, "output": out, "format": fmt, **NO_FILTER, **options}
            )
            cache[ident] = (meta, out)
        return cache[ident]

    return get


@pytest.mark.parametrize("key", list(PUBLISHED))
def test_published_counts(prepared, key):
    meta, out = prepared(key)
    assert (meta["users"], meta["items"], meta["events"]) == PUBLISHED[key][2]
    seqs = pl.read_parquet(out / schema.SEQUENCES_FILE)
    assert seqs.height == meta["users"]
    assert seqs[schema.ITEMS].list.len().sum() == meta["events"]
    assert meta["length_quantiles"]["max"] == seqs[schema.ITEMS].list.len().max()
    assert meta[schema.META_BUCKETS][-1] == meta["length_quantiles"]["max"]
    assert len(meta[schema.META_INPUT_SHA256]) == 64


def test_sasrec_order_is_file_order(prepared, shared_data):
    """Video.txt lists each user's items in time order: the sequences reproduce the file."""
    _, out = prepared("sasrec_video")
    raw = pl.read_csv(
        shared_data / "sasrec/Video.txt", separator=" ", has_header=False, new_columns=["u", "i"]
    )
    expected = raw.group_by("u", maintain_order=True).agg("i").sort("u")
    items = pl.read_parquet(out / schema.ITEMS_FILE)
    got = (
        pl.read_parquet(out / schema.SEQUENCES_FILE)
        .select(schema.USER, schema.ITEMS)
        .explode(schema.ITEMS)
        .join(items, left_on=schema.ITEMS, right_on=schema.ITEM, maintain_order="left")
        .group_by(schema.USER, maintain_order=True)
        .agg(pl.col(schema.ORIGINAL_ID).alias("i"))
    )
    assert got["i"].to_list() == expected["i"].to_list()


def test_taobao_event_filter_and_time_window(prepared):
    meta, out = prepared("taobao", event_types=("buy", "cart"))
    assert meta["events"] == 1_749 + 4_494
    vocab = meta[schema.META_VOCAB]["event"]
    assert sorted(vocab[1:]) == ["buy", "cart"]
    # the official window (UTC+8 2017-11-25 .. 2017-12-03) drops the 35 stray rows
    meta, _ = prepared("taobao", start_time=1_511_539_200, end_time=1_512_316_800)
    assert meta["events"] == 84_287 - 35


def test_ml1m_rating_threshold(prepared, shared_data):
    meta, _ = prepared("ml1m_part", min_rating=4)
    ratings = pl.read_csv(
        shared_data / PUBLISHED["ml1m_part"][0], separator=":", has_header=False
    )  # "::" read as ':' gives empty columns between the fields
    values = ratings.select(pl.nth(4)).to_series()
    assert meta["events"] == int((values >= 4).sum())


def test_kcore_holds_on_ml_latest(prepared):
    meta, out = prepared("ml_latest_small", min_user_events=20, min_item_events=10)
    seqs = pl.read_parquet(out / schema.SEQUENCES_FILE)
    assert seqs[schema.ITEMS].list.len().min() >= 20
    item_counts = seqs[schema.ITEMS].explode().value_counts()["count"]
    assert item_counts.min() >= 10 and meta["items"] == item_counts.len() < 9_724


def test_partitions_give_identical_output(prepared):
    _, one = prepared("ml1m_part", partitions=1)
    _, three = prepared("ml1m_part", partitions=3)
    for name in (schema.SEQUENCES_FILE, schema.ITEMS_FILE, schema.USERS_FILE):
        assert_frame_equal(pl.read_parquet(one / name), pl.read_parquet(three / name))


def test_temporal_split_never_leaks(prepared):
    meta, out = prepared("ml100k", split="temporal", split_cut_quantile=0.8)
    cut = meta[schema.META_SPLIT_CUT]
    assert meta[schema.META_SPLIT] == "temporal" and cut is not None
    seqs = pl.read_parquet(out / schema.SEQUENCES_FILE).with_columns(
        end=pl.coalesce(schema.VAL_INDEX, schema.TEST_INDEX, pl.col(schema.ITEMS).list.len())
    )
    train_max = seqs.select(pl.col(schema.TIMESTAMPS).list.slice(0, "end").list.max()).to_series()
    assert (train_max < cut).all()
    tested = seqs.filter(pl.col(schema.TEST_INDEX).is_not_null())
    targets = tested.select(pl.col(schema.TIMESTAMPS).list.get(pl.col(schema.TEST_INDEX)))
    assert (targets.to_series() >= cut).all() and tested.height > 100
    val = seqs.filter(pl.col(schema.VAL_INDEX).is_not_null())
    assert (
        val.select(pl.col(schema.TIMESTAMPS).list.get(pl.col(schema.VAL_INDEX))).to_series() < cut
    ).all()
    # at most one event at/after the cut per user, and it is the last
    after = seqs.select(pl.col(schema.TIMESTAMPS).list.eval(pl.element() >= cut).list.sum())
    assert after.to_series().max() == 1
