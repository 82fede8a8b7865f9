"""The bundled demo dataset: deterministic generator, expected counts, learnable structure."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import polars as pl
import pytest

from data_prep import schema
from data_prep.demo import prepare_demo
from data_prep.synthetic import BUNDLED_CLICKS, SyntheticConfig, generate

# counts of the bundled dataset with the default prep settings
EXPECTED = {"users": 3000, "items": 2000, "events": 79731}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo"
    return prepare_demo(out)


def test_generator_is_deterministic_and_log_like():
    cfg = SyntheticConfig(n_users=200)
    a, b = generate(cfg), generate(cfg)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    df = pl.DataFrame(a).with_row_index("row")
    lengths = df.group_by("user_id").len()["len"]
    assert lengths.min() >= cfg.min_len and lengths.max() <= cfg.max_len
    assert set(df["event_type"].unique()) == {"view", "cart", "purchase"}
    # ids are non-contiguous; the file is not sorted by (user, time); exact ties exist
    assert df["item_id"].min() >= 100_000_000
    assert not df.sort("user_id", "timestamp", "row")["row"].equals(df["row"])
    assert df.select(pl.struct("user_id", "timestamp").is_duplicated().any()).item()


def test_bundled_file_is_small_and_has_the_raw_header():
    assert BUNDLED_CLICKS.stat().st_size < 2_000_000
    head = pl.read_csv(BUNDLED_CLICKS, n_rows=5)
    assert head.columns == [
        schema.RAW_USER,
        schema.RAW_ITEM,
        schema.RAW_TIMESTAMP,
        schema.RAW_EVENT,
        schema.RAW_CATEGORY,
    ]


def test_bundled_prepares_with_expected_counts(demo):
    meta = json.loads((demo / schema.META_FILE).read_text())
    assert {k: meta[k] for k in EXPECTED} == EXPECTED
    q = meta["length_quantiles"]
    assert q["max"] == 200 and 20 <= q["mean"] <= 32 and q["p50"] < q["mean"]
    assert meta[schema.META_SIDE_FEATURES] == {"category": 41, "event": 4}
    assert meta[schema.META_BUCKETS][-1] == 200 and len(meta[schema.META_BUCKETS]) <= 8
    seqs = pl.read_parquet(demo / schema.SEQUENCES_FILE)
    assert seqs.height == EXPECTED["users"]
    assert seqs[schema.ITEMS].list.len().sum() == EXPECTED["events"]


def test_demo_has_sequential_structure_popularity_misses(demo):
    """Leave-one-out HR@10: a first-order transition count model >> popularity."""
    seqs = pl.read_parquet(demo / schema.SEQUENCES_FILE).to_dicts()
    pop: Counter = Counter()
    trans: dict[int, Counter] = defaultdict(Counter)
    for row in seqs:
        train = row[schema.ITEMS][: row[schema.VAL_INDEX] + 1]  # train + val, predict test
        pop.update(train)
        for a, b in zip(train[:-1], train[1:], strict=True):
            trans[a][b] += 1
    top = [i for i, _ in pop.most_common(10)]
    pop_hits = markov_hits = 0
    for row in seqs:
        t = row[schema.TEST_INDEX]
        target, prev = row[schema.ITEMS][t], row[schema.ITEMS][t - 1]
        pop_hits += target in top
        markov_hits += target in [i for i, _ in trans[prev].most_common(10)]
    pop_hr, markov_hr = pop_hits / len(seqs), markov_hits / len(seqs)
    assert pop_hr < 0.06
    assert markov_hr > 4 * pop_hr


def test_prepare_demo_concurrently_and_reuse(tmp_path):
    out = tmp_path / "demo"
    with ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(prepare_demo, [out, out]))
    assert paths == [out, out]
    meta = json.loads((out / schema.META_FILE).read_text())
    assert meta["users"] == EXPECTED["users"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]  # no temporary folders left
    mtime = (out / schema.META_FILE).stat().st_mtime_ns
    prepare_demo(out)  # same fingerprint: kept as is
    assert (out / schema.META_FILE).stat().st_mtime_ns == mtime
