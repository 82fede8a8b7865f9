"""The prep job on tiny logs made in tmp_path: ids, order, truncation, splits, meta, atomicity."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data_prep import PrepError, prepare, read_meta, schema
from data_prep import stats as stats_mod
from data_prep.stats import padding_waste, suggest_buckets

REPO = Path(__file__).resolve().parents[1]
HEADER = "user_id,item_id,timestamp,event_type,category"


def write_log(path: Path, rows: list[tuple], header: str = HEADER) -> Path:
    text = (
        header
        + "\n"
        + "\n".join(",".join("" if v is None else str(v) for v in r) for r in rows)
        + "\n"
    )
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def run(tmp_path: Path, rows: list[tuple], **cfg) -> tuple[dict, dict[str, pl.DataFrame]]:
    src = write_log(tmp_path / "log.csv", rows)
    out = tmp_path / "out"
    meta = prepare({"input": src, "output": out, **cfg})
    frames = {
        "sequences": pl.read_parquet(out / schema.SEQUENCES_FILE),
        "items": pl.read_parquet(out / schema.ITEMS_FILE),
        "users": pl.read_parquet(out / schema.USERS_FILE),
    }
    return meta, frames


# user 900: 4 events, user 100: 3 events, user 500: 1 event (filtered by default)
ROWS = [
    (900, 77, 10, "view", "a"),
    (100, 55, 5, "view", "b"),
    (900, 55, 20, "cart", "b"),
    (100, 77, 6, "purchase", "a"),
    (900, 33, 30, "view", None),
    (500, 11, 1, "view", "a"),
    (100, 77, 7, "view", "a"),
    (900, 77, 40, "view", "a"),
]


def test_id_mapping_pad_and_originals(tmp_path):
    meta, f = run(tmp_path, ROWS)
    # items by descending frequency, ties by original id; 0 is PAD and never used
    expected_items = pl.DataFrame(
        {schema.ITEM: [1, 2, 3], schema.ORIGINAL_ID: [77, 55, 33]},
    )
    assert_frame_equal(f["items"].select(schema.ITEM, schema.ORIGINAL_ID), expected_items)
    # users 0..U-1 in original-id order; user 500 (1 event) filtered out
    assert_frame_equal(
        f["users"], pl.DataFrame({schema.USER: [0, 1], schema.ORIGINAL_ID: [100, 900]})
    )
    seqs = f["sequences"]
    assert seqs[schema.USER].to_list() == [0, 1]
    assert all(schema.PAD not in s for s in seqs[schema.ITEMS].to_list())
    # map back to original ids: the time-ordered raw histories
    back = (
        seqs.select(schema.USER, schema.ITEMS)
        .explode(schema.ITEMS)
        .join(
            f["items"].rename({schema.ITEM: schema.ITEMS}),
            on=schema.ITEMS,
            how="left",
            maintain_order="left",
        )
        .join(
            f["users"].rename({schema.ORIGINAL_ID: "user_id"}),
            on=schema.USER,
            maintain_order="left",
        )
        .group_by("user_id", maintain_order=True)
        .agg(pl.col(schema.ORIGINAL_ID).alias("history"))
    )
    assert back.rows() == [(100, [55, 77, 77]), (900, [77, 55, 33, 77])]
    assert meta["users"] == 2 and meta["items"] == 3 and meta["events"] == 7


def test_training_counts_exclude_val_and_test(tmp_path):
    _, f = run(tmp_path, ROWS)
    # training parts: user 100 -> [55], user 900 -> [77, 55]
    counts = dict(zip(f["items"][schema.ORIGINAL_ID], f["items"][schema.COUNT], strict=True))
    assert counts == {77: 1, 55: 2, 33: 0}


def test_time_order_with_ties_is_deterministic(tmp_path):
    rows = [
        (1, 30, 100, "view", "a"),
        (1, 10, 50, "view", "a"),
        (1, 20, 100, "view", "a"),  # tie with the first row: file order wins (30 before 20)
        (1, 40, 100, "view", "a"),
        (1, 50, 10, "view", "a"),
    ]
    _, f = run(tmp_path, rows)
    items = f["items"]
    originals = dict(zip(items[schema.ITEM], items[schema.ORIGINAL_ID], strict=True))
    seq = [originals[i] for i in f["sequences"][schema.ITEMS][0]]
    assert seq == [50, 10, 30, 20, 40]
    assert f["sequences"][schema.TIMESTAMPS][0].to_list() == [10, 50, 100, 100, 100]
    # a second run gives identical files
    _, g = run(tmp_path, rows)
    assert_frame_equal(f["sequences"], g["sequences"])


def test_truncation_keeps_most_recent(tmp_path):
    rows = [(7, 100 + t, t, "view", "a") for t in (5, 1, 4, 2, 3, 6)]
    meta, f = run(tmp_path, rows, max_len=3)
    seq = f["sequences"]
    assert seq[schema.TIMESTAMPS][0].to_list() == [4, 5, 6]
    assert sorted(f["items"][schema.ORIGINAL_ID].to_list()) == [104, 105, 106]
    assert meta["length_quantiles"]["max"] == 3


def test_leave_one_out_indices(tmp_path):
    rows = [(1, 10 + t, t, "view", "a") for t in range(5)]
    rows += [(2, 20 + t, t, "view", "a") for t in range(3)]
    rows += [(3, 30 + t, t, "view", "a") for t in range(2)]
    rows += [(4, 40, 0, "view", "a")]
    _, f = run(tmp_path, rows, min_user_events=1)
    got = f["sequences"].select(
        pl.col(schema.ITEMS).list.len().alias("n"), schema.VAL_INDEX, schema.TEST_INDEX
    )
    expected = pl.DataFrame(
        {
            "n": [5, 3, 2, 1],
            schema.VAL_INDEX: [3, 1, None, None],
            schema.TEST_INDEX: [4, 2, 1, None],
        },
        schema={"n": pl.UInt32, schema.VAL_INDEX: pl.Int64, schema.TEST_INDEX: pl.Int64},
    )
    assert_frame_equal(got, expected)


@pytest.mark.parametrize(("min_events", "users"), [(1, 3), (3, 2), (4, 1), (5, 0)])
def test_min_user_events(tmp_path, min_events, users):
    if users == 0:
        with pytest.raises(PrepError, match="No users left"):
            run(tmp_path, ROWS, min_user_events=min_events)
        return
    meta, f = run(tmp_path, ROWS, min_user_events=min_events)
    assert meta["users"] == f["sequences"].height == users
    assert f["sequences"][schema.ITEMS].list.len().min() >= min_events


def test_dedup_consecutive(tmp_path):
    rows = [(1, i, t, "view", "a") for t, i in enumerate([5, 5, 6, 5, 6, 6])]
    _, f = run(tmp_path, rows, dedup="consecutive")
    originals = dict(zip(f["items"][schema.ITEM], f["items"][schema.ORIGINAL_ID], strict=True))
    assert [originals[i] for i in f["sequences"][schema.ITEMS][0]] == [5, 6, 5, 6]


def test_side_features_parallel_with_pad_for_unknown(tmp_path):
    meta, f = run(tmp_path, ROWS)
    seqs = f["sequences"]
    for name in ("category", "event"):
        assert (seqs[name].list.len() == seqs[schema.ITEMS].list.len()).all()
    vocab = meta[schema.META_VOCAB]
    assert vocab["event"][0] == "<pad>" and vocab["category"][0] == "<pad>"
    # user 900 (row 1): categories a, b, <null>, a -> codes via vocab, null -> PAD
    cats = [vocab["category"][c] for c in seqs["category"][1]]
    assert cats == ["a", "b", "<pad>", "a"]
    events = [vocab["event"][c] for c in seqs["event"][1]]
    assert events == ["view", "cart", "view", "view"]
    assert meta[schema.META_SIDE_FEATURES] == {"category": 3, "event": 4}
    # items.parquet carries each item's most frequent category code
    item_cat = dict(zip(f["items"][schema.ORIGINAL_ID], f["items"]["category"], strict=True))
    assert vocab["category"][item_cat[77]] == "a" and item_cat[33] == schema.PAD


def test_missing_optional_columns_are_skipped(tmp_path):
    src = write_log(
        tmp_path / "plain.csv",
        [(1, 2, 3), (1, 3, 4), (1, 4, 5)],
        header="user_id,item_id,timestamp",
    )
    meta = prepare({"input": src, "output": tmp_path / "out"})
    assert meta[schema.META_SIDE_FEATURES] == {}
    assert pl.read_parquet(tmp_path / "out" / schema.SEQUENCES_FILE).columns == [
        schema.USER,
        schema.ITEMS,
        schema.TIMESTAMPS,
        schema.VAL_INDEX,
        schema.TEST_INDEX,
    ]


def test_meta_contents_and_fingerprints(tmp_path):
    meta, f = run(tmp_path, ROWS)
    on_disk = read_meta(tmp_path / "out")
    assert on_disk == json.loads(json.dumps(meta))
    assert meta[schema.META_SCHEMA_VERSION] == schema.SCHEMA_VERSION
    assert meta["split"] == "leave_one_out"
    assert meta["config"]["max_len"] == 200 and meta["config"]["min_user_events"] == 3
    assert meta["config"]["format"]["name"] == "csv"
    assert set(meta["length_quantiles"]) == {"p50", "p90", "p95", "p99", "max", "mean"}
    assert meta[schema.META_BUCKETS][-1] == meta["length_quantiles"]["max"] == 4
    assert (tmp_path / "out" / schema.HISTOGRAM_FILE).stat().st_size > 1000
    # fingerprint: same input+config -> same, independent of output path; config change -> new
    again = prepare({"input": tmp_path / "log.csv", "output": tmp_path / "other"})
    assert again[schema.META_FINGERPRINT] == meta[schema.META_FINGERPRINT]
    assert again[schema.META_ITEM_FINGERPRINT] == meta[schema.META_ITEM_FINGERPRINT]
    changed = prepare({"input": tmp_path / "log.csv", "output": tmp_path / "o2", "max_len": 3})
    assert changed[schema.META_FINGERPRINT] != meta[schema.META_FINGERPRINT]
    # item fingerprint changes with the item vocabulary
    fewer = prepare(
        {"input": tmp_path / "log.csv", "output": tmp_path / "o3", "min_user_events": 4}
    )
    assert fewer[schema.META_ITEM_FINGERPRINT] != meta[schema.META_ITEM_FINGERPRINT]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_atomic_write_failure_keeps_previous_output(tmp_path, monkeypatch):
    run(tmp_path, ROWS)
    out = tmp_path / "out"
    before = _snapshot(out)

    def boom(*args, **kwargs):
        raise RuntimeError("disk full (simulated)")

    monkeypatch.setattr(stats_mod, "write_histogram", boom)
    with pytest.raises(RuntimeError, match="simulated"):
        prepare({"input": tmp_path / "log.csv", "output": out, "max_len": 2})
    assert _snapshot(out) == before
    # no temporary folders left behind; a failed first run leaves nothing
    with pytest.raises(RuntimeError):
        prepare({"input": tmp_path / "log.csv", "output": tmp_path / "fresh"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv", "out"]


def test_rerun_replaces_output(tmp_path):
    run(tmp_path, ROWS)
    meta = prepare({"input": tmp_path / "log.csv", "output": tmp_path / "out", "max_len": 2})
    assert read_meta(tmp_path / "out")["config"]["max_len"] == 2 == meta["length_quantiles"]["max"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv", "out"]


def test_reuse_existing_skips_same_fingerprint(tmp_path):
    meta, _ = run(tmp_path, ROWS)
    mtime = (tmp_path / "out" / schema.META_FILE).stat().st_mtime_ns
    again = prepare(
        {"input": tmp_path / "log.csv", "output": tmp_path / "out", "reuse_existing": True}
    )
    assert again == read_meta(tmp_path / "out")
    assert (tmp_path / "out" / schema.META_FILE).stat().st_mtime_ns == mtime


# ---------------------------------------------------------------- buckets


def _brute_force(lengths: np.ndarray, k: int) -> float:
    values = np.unique(lengths)
    best = np.inf
    for inner in itertools.combinations(values[:-1], k - 1):
        best = min(best, padding_waste(lengths, [*inner, values[-1]]))
    return best


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_suggest_buckets_is_optimal(seed):
    lengths = np.random.default_rng(seed).integers(1, 30, 60)
    for k in (1, 2, 3):
        edges = suggest_buckets(lengths, max_buckets=k, waste=0.0)
        assert edges == sorted(edges) and edges[-1] == lengths.max() and len(edges) <= k
        assert padding_waste(lengths, edges) == pytest.approx(_brute_force(lengths, k))


def test_suggest_buckets_stops_when_waste_is_small():
    lengths = np.array([5] * 100 + [6] * 100 + [50] * 10)
    assert suggest_buckets(lengths, max_buckets=8, waste=0.1) == [6, 50]  # waste 6.25%
    assert suggest_buckets(lengths, max_buckets=8, waste=0.05) == [5, 6, 50]


# ---------------------------------------------------------------- formats


def test_multichar_separator_and_gzip(tmp_path):
    text = "1::10::5::300\n1::11::3::100\n1::12::4::200\n2::10::1::5\n"
    src = tmp_path / "ratings.dat.gz"
    src.write_bytes(gzip.compress(text.encode()))
    meta = prepare({"input": src, "output": tmp_path / "out", "format": "movielens_dat"})
    seqs = pl.read_parquet(tmp_path / "out" / schema.SEQUENCES_FILE)
    assert meta["users"] == 1 and seqs[schema.TIMESTAMPS][0].to_list() == [100, 200, 300]
    users = pl.read_parquet(tmp_path / "out" / schema.USERS_FILE)
    assert users[schema.ORIGINAL_ID].dtype == pl.Int64


def test_sasrec_txt_uses_row_order(tmp_path):
    src = tmp_path / "Video.txt"
    src.write_text("1 5\n1 3\n2 9\n1 4\n2 8\n2 7\n")
    prepare({"input": src, "output": tmp_path / "out", "format": "sasrec_txt"})
    items = pl.read_parquet(tmp_path / "out" / schema.ITEMS_FILE)
    originals = dict(zip(items[schema.ITEM], items[schema.ORIGINAL_ID], strict=True))
    seqs = pl.read_parquet(tmp_path / "out" / schema.SEQUENCES_FILE)
    assert [[originals[i] for i in s] for s in seqs[schema.ITEMS].to_list()] == [
        [5, 3, 4],
        [9, 8, 7],
    ]


def test_s3rec_lines(tmp_path):
    src = tmp_path / "Beauty.txt"
    src.write_text("1 5 3 4\n2 9 8 7 6\n")
    meta = prepare({"input": src, "output": tmp_path / "out", "format": "s3rec_txt"})
    assert (meta["users"], meta["items"], meta["events"]) == (2, 7, 7)


# ---------------------------------------------------------------- CLI


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    return subprocess.run(
        [sys.executable, "-m", "data_prep", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_missing_file(tmp_path):
    res = _cli(tmp_path, "input=nowhere/log.csv", "output=out")
    assert res.returncode != 0
    assert "nowhere/log.csv" in res.stderr and "Traceback" not in res.stderr + res.stdout
    assert not (tmp_path / "out").exists()


def test_cli_missing_column_and_success(tmp_path):
    write_log(tmp_path / "log.csv", ROWS)
    res = _cli(tmp_path, "input=log.csv", "output=out", "format.columns.user_id=uid")
    assert res.returncode != 0
    assert "'uid'" in res.stderr and "log.csv" in res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    ok = _cli(tmp_path, "input=log.csv", "output=out")
    assert ok.returncode == 0, ok.stderr
    assert "users" in ok.stdout and str((tmp_path / "out").resolve()) in ok.stdout
    assert read_meta(tmp_path / "out")["users"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv", "out"]  # nothing else


def test_conf_formats_load():
    from data_prep.formats import READERS, load_format
    from recsys_seq.core.conf import CONF_DIR

    names = sorted(p.stem for p in (CONF_DIR / "format").glob("*.yaml"))
    assert {"csv", "tsv", "movielens_dat", "sasrec_txt", "s3rec_txt", "taobao"} <= set(names)
    for name in names:
        fmt = load_format(name)
        assert fmt["name"] == name and fmt["reader"] in READERS


def test_python_defaults_are_the_composed_cli_config():
    """conf/prep.yaml is the one owner of the defaults: the Python API reads exactly what
    Hydra composes for recsys-prep (the format, the item table's format and the cluster by
    name, as the defaults list chooses them; no cluster or item format composes no key)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from data_prep.formats import load_format
    from data_prep.prep import defaults
    from recsys_seq.core.conf import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        composed = OmegaConf.to_container(compose("prep"), resolve=True)
    ours = defaults()
    assert ours["format"] == "csv" and composed["format"] == load_format("csv")
    assert ours.pop("cluster") is None and "cluster" not in composed
    assert ours.pop("items_format") is None and "items_format" not in composed
    assert {**ours, "format": composed["format"]} == composed
