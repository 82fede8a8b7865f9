"""The configurable steps on tiny logs: filters, dedup, iterative k-core, temporal split, gap
codes, formats, partitions."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data_prep import prepare, schema
from data_prep.demo import demo_config
from data_prep.steps import gap_labels

HEADER = "user_id,item_id,timestamp,event_type,rating"


def log(tmp_path, rows, header=HEADER, name="log.csv"):
    path = tmp_path / name
    path.write_text(header + "\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    return path


def histories(out) -> list[list]:
    """Each user's item list in original ids, users in index order."""
    items = pl.read_parquet(out / schema.ITEMS_FILE)
    back = dict(zip(items[schema.ITEM], items[schema.ORIGINAL_ID], strict=True))
    seqs = pl.read_parquet(out / schema.SEQUENCES_FILE)
    return [[back[i] for i in s] for s in seqs[schema.ITEMS].to_list()]


def test_dedup_all_keeps_first_occurrence(tmp_path):
    src = log(tmp_path, [(1, i, t, "pv", 5) for t, i in enumerate([5, 6, 5, 7, 6, 8])])
    prepare({"input": src, "output": tmp_path / "o", "dedup": "all"})
    assert histories(tmp_path / "o") == [[5, 6, 7, 8]]


def test_event_type_and_rating_filters(tmp_path):
    rows = [(1, 10, 1, "pv", 5), (1, 11, 2, "buy", 2), (1, 12, 3, "cart", 4), (1, 13, 4, "buy", 4)]
    src = log(tmp_path, rows)
    prepare(
        {
            "input": src,
            "output": tmp_path / "a",
            "event_types": ["buy", "cart"],
            "min_user_events": 1,
        }
    )
    assert histories(tmp_path / "a") == [[11, 12, 13]]
    prepare({"input": src, "output": tmp_path / "b", "min_rating": 4, "min_user_events": 1})
    assert histories(tmp_path / "b") == [[10, 12, 13]]


def test_time_window_accepts_dates(tmp_path):
    day = 86_400
    rows = [(1, 10 + d, 1_700_000_000 + d * day, "pv", 5) for d in range(6)]
    src = log(tmp_path, rows)  # 2023-11-14 22:13:20 UTC + d days
    meta = prepare(
        {
            "input": src,
            "output": tmp_path / "o",
            "start_time": "2023-11-16",
            "end_time": 1_700_000_000 + 4 * day,
            "min_user_events": 1,
        }
    )
    assert histories(tmp_path / "o") == [[12, 13]] and meta["events"] == 2


def test_kcore_iterates_until_it_holds(tmp_path):
    # a cascade: dropping rare items makes users too short, which makes an item rare
    rows = [
        (1, 10, 1, "pv", 5),
        (1, 11, 2, "pv", 5),
        (1, 12, 3, "pv", 5),
        (2, 10, 1, "pv", 5),
        (2, 11, 2, "pv", 5),
        (2, 12, 3, "pv", 5),
        (3, 10, 1, "pv", 5),
        (3, 13, 2, "pv", 5),
        (3, 14, 3, "pv", 5),  # 13, 14: 1 event each
        (4, 13, 1, "pv", 5),
        (4, 15, 2, "pv", 5),
        (4, 10, 3, "pv", 5),
    ]
    meta = prepare(
        {
            "input": log(tmp_path, rows),
            "output": tmp_path / "o",
            "min_user_events": 3,
            "min_item_events": 2,
        }
    )
    # round 1 drops items 14, 15 (1 event) -> users 3 and 4 fall to 2 events -> dropped;
    # round 2: item 13 now has 0 events; users 1, 2 keep 10, 11, 12 (2 events each)
    assert histories(tmp_path / "o") == [[10, 11, 12], [10, 11, 12]]
    assert (meta["users"], meta["items"]) == (2, 3)


def test_temporal_split_semantics(tmp_path):
    rows = [(1, 10 + t, t, "pv", 5) for t in range(0, 10)]  # user 1: 0..9
    rows += [(2, 30 + t, t, "pv", 5) for t in (1, 2)]  # user 2: only before the cut
    rows += [(3, 40 + t, t, "pv", 5) for t in (3, 7, 8)]  # one before, two after
    rows += [(4, 50 + t, t, "pv", 5) for t in (6, 7, 8)]  # none before: dropped
    src = log(tmp_path, rows)
    meta = prepare(
        {
            "input": src,
            "output": tmp_path / "o",
            "split": "temporal",
            "split_cut": 5,
            "min_user_events": 1,
        }
    )
    assert meta[schema.META_SPLIT_CUT] == 5 and meta["users"] == 3
    seqs = pl.read_parquet(tmp_path / "o" / schema.SEQUENCES_FILE)
    got = seqs.select(schema.TIMESTAMPS, schema.VAL_INDEX, schema.TEST_INDEX).rows()
    assert got == [
        ([0, 1, 2, 3, 4, 5], 4, 5),  # events after the first post-cut one are dropped
        ([1, 2], 1, None),  # no test target; validation = last event before the cut
        ([3, 7], None, 1),  # validation would have no input; test input = [3]
    ]
    items = pl.read_parquet(tmp_path / "o" / schema.ITEMS_FILE)
    counts = dict(zip(items[schema.ORIGINAL_ID], items[schema.COUNT], strict=True))
    assert counts[14] == 0 and counts[15] == 0 and counts[47] == 0 and counts[43] == 1


def test_gap_feature_codes(tmp_path):
    rows = [
        (1, 10, 100, "pv", 5),
        (1, 11, 100, "pv", 5),
        (1, 12, 103, "pv", 5),
        (1, 13, 100_103, "pv", 5),
    ]
    meta = prepare(
        {"input": log(tmp_path, rows), "output": tmp_path / "o", "side_features": ["event", "gap"]}
    )
    vocab = meta[schema.META_VOCAB]["gap"]
    assert vocab[1:] == gap_labels() and meta[schema.META_SIDE_FEATURES]["gap"] == len(vocab)
    seq = pl.read_parquet(tmp_path / "o" / schema.SEQUENCES_FILE)
    assert seq.columns[-2:] == ["event", "gap"]
    assert [vocab[c] for c in seq["gap"][0]] == ["first", "0s", "3-6s", "65535-131070s"]


def test_gap_codes_with_many_users_whose_clocks_go_back(tmp_path):
    # the next user's first event is earlier than the previous user's last: its gap would be
    # negative (the log of it NaN) if it were not the user's "first" event
    rows = [(u, 10 + i, 1_000 * (3 - u) + 7 * i, "pv", 5) for u in (1, 2, 3) for i in range(4)]
    meta = prepare(
        {"input": log(tmp_path, rows), "output": tmp_path / "o", "side_features": ["gap"]}
    )
    vocab = meta[schema.META_VOCAB]["gap"]
    seq = pl.read_parquet(tmp_path / "o" / schema.SEQUENCES_FILE).sort(schema.USER)
    assert [[vocab[c] for c in codes] for codes in seq["gap"]] == [
        ["first", "7-14s", "7-14s", "7-14s"]
    ] * 3


def test_gap_needs_a_clock(tmp_path):
    src = tmp_path / "v.txt"
    src.write_text("1 5\n1 6\n1 7\n")
    with pytest.raises(Exception, match="needs timestamps"):
        prepare(
            {
                "input": src,
                "output": tmp_path / "o",
                "format": "sasrec_txt",
                "side_features": ["gap"],
            }
        )


def test_jsonl_gz_and_string_dates(tmp_path):
    lines = [
        {"u": "a", "i": "x", "t": "2024-01-01T00:00:02"},
        {"u": "a", "i": "y", "t": "2024-01-01T00:00:01"},
        {"u": "a", "i": "z", "t": "2024-01-01T00:00:03"},
    ]
    src = tmp_path / "log.jsonl.gz"
    src.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in lines).encode()))
    fmt = {
        "name": "jsonl",
        "reader": "jsonl",
        "columns": {"user_id": "u", "item_id": "i", "timestamp": "t"},
    }
    prepare({"input": src, "output": tmp_path / "o", "format": fmt})
    assert histories(tmp_path / "o") == [["y", "x", "z"]]


def test_demo_identical_with_partitions(tmp_path):
    one = tmp_path / "one"
    prepare({**demo_config(one), "reuse_existing": False})
    four = tmp_path / "four"
    meta = prepare({**demo_config(four), "reuse_existing": False, "partitions": 4})
    assert meta["partitions"] == 4
    for name in (schema.SEQUENCES_FILE, schema.ITEMS_FILE, schema.USERS_FILE):
        assert_frame_equal(pl.read_parquet(one / name), pl.read_parquet(four / name))
    assert json.loads((one / schema.META_FILE).read_text())["fingerprint"] == meta["fingerprint"]
