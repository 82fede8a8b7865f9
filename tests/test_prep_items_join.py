"""Item tables joined to the log (``items=<file> items_format=<format>``): the table's ids meet
the log's by the id policy; attributes are coded for items.parquet (numbers in quantile
buckets) and described in meta.json; the table is part of the fingerprint; a Dask cluster
gives the one-process result.
"""

from __future__ import annotations

import polars as pl
import pytest
from test_prep_cluster import LOCAL_2, assert_same_dataset, synthetic_log

from data_prep import prepare, schema
from recsys_seq.data import PreparedSequences
from tests.helpers import ITEMS, run, write
from tests.helpers.items import GENERIC, LOG, by_id, decoded, vocab

# ---------------------------------------------------------------------------- the join


def test_ids_with_leading_zeros_and_whitespace_are_the_logs_items(tmp_path):
    """ " 014" and "0099" are the log's 14 and 99; the table's 500 is not in the log (dropped
    and counted), the log's 3 has no row (PAD, counted)."""
    log = write(tmp_path, "log.csv", LOG)
    table_file = write(
        tmp_path,
        "items.csv",
        "item_id,genres,brand,price\n 014,Action|Comedy,acme,3.5\n+7,Comedy,acme,\n"
        "0099, Drama | Action ,zen,10\n500,Horror,zen,1\n",
    )
    meta = run(tmp_path, log, items=table_file, items_format=GENERIC)
    assert meta[schema.META_ITEM_TABLE] | {"sha256": None} == {
        "file": str(table_file),
        "format": "csv",
        "sha256": None,
        "rows": 4,
        "matched": 3,
        "not_in_log": 1,
        "without_row": 1,
    }
    assert decoded(tmp_path, meta, "brand") == {3: "<pad>", 7: "acme", 14: "acme", 99: "zen"}
    assert decoded(tmp_path, meta, "genres") == {
        3: [],
        7: ["Comedy"],
        14: ["Action", "Comedy"],
        99: ["Drama", "Action"],  # stripped, in the table's order
    }
    assert by_id(tmp_path, "price")[3] == 0 and by_id(tmp_path, "price")[7] == 0  # missing
    assert "Horror" not in vocab(meta, "genres")  # only the kept items' values are coded
    PreparedSequences.load(tmp_path / "out")  # the folder passes its own checks


def test_text_ids_in_the_log_meet_integer_ids_in_the_table(tmp_path):
    log = write(tmp_path, "log.csv", "user_id,item_id,timestamp\nu,A-1,1\nu,0042,2\nu,7,3\n")
    items = pl.DataFrame({"item_id": [42, 7], "genres": [["x"], ["y", "x"]]})
    table_file = write(tmp_path, "items.parquet", items)
    fmt = {"reader": "parquet", "multi": ["genres"]}
    meta = run(tmp_path, log, items=table_file, items_format=fmt)
    assert decoded(tmp_path, meta, "genres") == {"42": ["x"], "7": ["y", "x"], "A-1": []}


def test_codes_follow_the_side_features_rule(tmp_path):
    """Codes 1.. by descending number of kept items, ties by value; 0 is PAD, and the
    vocabulary's position 0 says so; PAD never appears inside a multi list."""
    log = write(tmp_path, "log.csv", LOG)
    table_file = write(
        tmp_path,
        "items.csv",
        "item_id,genres,brand\n14,b|a,z\n7,b|c,y\n99,a|b|b,y\n3,,\n",
    )
    fmt = {"reader": "csv", "categorical": ["brand"], "multi": ["genres"]}
    meta = run(tmp_path, log, items=table_file, items_format=fmt)
    assert vocab(meta, "genres") == ["<pad>", "b", "a", "c"]  # b: 3 items, a: 2, c: 1
    assert vocab(meta, "brand") == ["<pad>", "y", "z"]
    attributes = meta[schema.META_ITEM_ATTRIBUTES]
    assert {k: (v["kind"], v["size"]) for k, v in attributes.items()} == {
        "brand": ("categorical", 3),
        "genres": ("multi", 4),
    }
    assert by_id(tmp_path, "genres") == {3: [], 7: [1, 3], 14: [1, 2], 99: [2, 1]}
    assert pl.read_parquet(tmp_path / "out" / ITEMS).schema["genres"] == pl.List(pl.Int64)


def test_numeric_columns_are_quantile_buckets_with_missing_values_pad(tmp_path):
    """20 items priced 1..20 (two missing: empty and NaN) in 4 buckets: each holds items, the
    edges are values of the data, and missing is 0."""
    log = write(
        tmp_path,
        "log.csv",
        "user_id,item_id,timestamp\n" + "".join(f"u{i % 3},{i},{i}\n" for i in range(1, 23)),
    )
    prices = [str(i) for i in range(1, 21)] + ["", "NaN"]
    rows = "".join(f"{i},{p}\n" for i, p in enumerate(prices, start=1))
    table_file = write(tmp_path, "items.csv", "item_id,price\n" + rows)
    fmt = {"reader": "csv", "numeric": ["price"]}
    meta = run(tmp_path, log, items=table_file, items_format=fmt, item_buckets=4)
    price = meta[schema.META_ITEM_ATTRIBUTES]["price"]
    assert price["kind"] == "numeric-bucketed"
    assert price["edges"] == [6.0, 11.0, 16.0]
    assert price["vocab"] == ["<pad>", "[-inf, 6)", "[6, 11)", "[11, 16)", "[16, inf)"]
    codes = by_id(tmp_path, "price")
    assert [codes[i] for i in range(1, 23)] == [1] * 5 + [2] * 5 + [3] * 5 + [4] * 5 + [0, 0]


@pytest.mark.parametrize(
    ("prices", "labels"),
    [
        ([1000001, 1000002, 1000003, 1000004], ["[1000002, 1000003)", "[1000003, 1000004)"]),
        ([0.1000001, 0.1000002, 0.1000003, 0.1000004], ["[0.1000002, 0.1000003)"]),
    ],
)
def test_bucket_labels_are_exact(tmp_path, prices, labels):
    """Close edges never print alike: a label names its bucket."""
    log = write(tmp_path, "log.csv", LOG)
    rows = "".join(f"{item},{price}\n" for item, price in zip([14, 7, 3, 99], prices, strict=True))
    table_file = write(tmp_path, "items.csv", "item_id,price\n" + rows)
    meta = run(tmp_path, log, items=table_file, items_format={"numeric": ["price"]}, item_buckets=4)
    words = vocab(meta, "price")
    assert len(set(words)) == len(words) and set(labels) <= set(words)


def test_few_distinct_values_get_a_bucket_each_and_ties_merge_buckets(tmp_path):
    log = write(tmp_path, "log.csv", LOG)
    table_file = write(tmp_path, "items.csv", "item_id,price\n14,2\n7,2\n99,5\n3,5\n")
    meta = run(tmp_path, log, items=table_file, items_format={"numeric": ["price"]})
    assert meta[schema.META_ITEM_ATTRIBUTES]["price"]["edges"] == [5.0]
    assert by_id(tmp_path, "price") == {3: 2, 7: 1, 14: 1, 99: 2}


def test_the_item_table_changes_the_fingerprint_and_its_options_only_with_one(tmp_path):
    log = write(tmp_path, "log.csv", LOG)
    plain = run(tmp_path, log)[schema.META_FINGERPRINT]
    assert run(tmp_path, log, item_buckets=3)[schema.META_FINGERPRINT] == plain
    first = write(tmp_path, "a.csv", "item_id,genres\n14,x\n")
    second = write(tmp_path, "b.csv", "item_id,genres\n14,y\n")
    fmt = {"multi": ["genres"]}
    with_first = run(tmp_path, log, items=first, items_format=fmt)[schema.META_FINGERPRINT]
    with_second = run(tmp_path, log, items=second, items_format=fmt)[schema.META_FINGERPRINT]
    assert len({plain, with_first, with_second}) == 3


# ---------------------------------------------------------------------------- Dask


@pytest.mark.slow
def test_cluster_equals_one_process_with_an_item_table(tmp_path):
    """cluster=local cluster.workers=2 reads the table once and joins it where items.parquet
    is built: every table and meta.json equal the one-process job's."""
    log = synthetic_log()
    log.write_csv(tmp_path / "log.csv")
    ids = log["item_id"].unique().sort()
    extra = pl.Series([1, 2, 3])  # not in the log
    all_ids = pl.concat([ids, extra])
    n = all_ids.len()
    items = pl.DataFrame(
        {
            "item_id": all_ids.cast(pl.String).str.zfill(12).str.pad_start(13),  # " 000...
            "genres": [f"g{i % 5}|g{i % 7}" for i in range(n)],
            "brand": [f"b{i % 11}" if i % 9 else "" for i in range(n)],
            "price": [str(i % 37) if i % 6 else "" for i in range(n)],
        }
    )
    items.write_csv(tmp_path / "items.csv")
    options = {
        "input": str(tmp_path / "log.csv"),
        "items": str(tmp_path / "items.csv"),
        "items_format": GENERIC,
        "min_item_events": 2,
    }
    one = prepare({**options, "output": str(tmp_path / "one")})
    prepare({**options, "output": str(tmp_path / "dask"), "cluster": LOCAL_2, "partitions": 3})
    assert_same_dataset(tmp_path / "one", tmp_path / "dask")
    assert one[schema.META_ITEM_TABLE]["not_in_log"] >= 3
