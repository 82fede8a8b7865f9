"""Ids are labels: ids at the limits of every integer type, and long or zero-padded text ids,
prepare into the same sequences as small ids and come back unchanged everywhere they are shown.

A small log is written once with ids ``0..7`` and again with each id replaced by one at a
limit, in an order-preserving map (so users and items keep their order and the prepared
sequences must be equal); every such log goes through :func:`data_prep.prepare` in this
process. One log of UInt64 ids beyond int64 is also trained for a few batches and served
through ``recsys-recommend`` and the Python API (a module fixture). Serving names ids by the
catalogue a checkpoint carries, whose stored forms and fingerprints are checked here too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import recsys_seq
from data_prep import prepare, schema
from data_prep.lines import INFER_ROWS
from data_prep.prep import item_fingerprint
from recsys_seq.checkpoint import open_checkpoint
from recsys_seq.data.catalogue import Catalogue, CatalogueError
from recsys_seq.workflows.recommend import recommend
from tests.helpers import (
    compose_config,
    histories,
    must_succeed,
    refused,
    run_cli,
    short_checkpoint,
    write,
)

IDS = 8  # distinct small ids of the log, 0..7, for users and items alike
REPORTED = 18446744073709551000  # the reported log's user ids are REPORTED + n
PREP = {"min_user_events": 2, "min_item_events": 2, "dedup": "consecutive"}
LIMITS = {
    pl.Int8: (-(2**7), 2**7 - 1),
    pl.Int16: (-(2**15), 2**15 - 1),
    pl.Int32: (-(2**31), 2**31 - 1),
    pl.Int64: (-(2**63), 2**63 - 1),
    pl.UInt8: (0, 2**8 - 1),
    pl.UInt16: (0, 2**16 - 1),
    pl.UInt32: (0, 2**32 - 1),
    pl.UInt64: (0, 2**64 - 1),
}


def small_log() -> pl.DataFrame:
    """Six users' events on items 0..7, rows out of time order, a timestamp tie, consecutive
    repeats (dropped by dedup) and an item seen once (dropped by the k-core)."""
    rows = [
        (user, (3 * user + 5 * t) % 7, 1_000 + 10 * t - (t == 3) * 10)
        for user in range(6)
        for t in range(5)
    ]
    rows += [(0, 2, 1_045), (0, 2, 1_046), (5, 7, 900)]
    rows.reverse()
    return pl.DataFrame(rows, schema=["user_id", "item_id", "timestamp"], orient="row")


def mapped(log: pl.DataFrame, to: Callable[[int], object], dtype: pl.DataType) -> pl.DataFrame:
    """``log`` with every user and item id ``n`` replaced by ``to(n)``, of type ``dtype``."""
    ids = {n: to(n) for n in range(IDS)}
    return log.with_columns(
        pl.col(c).replace_strict(ids, return_dtype=dtype) for c in ("user_id", "item_id")
    )


# where in a type's range (low, high) the ids go: each place maps the small ids in order


def at_low(low: int, high: int) -> Callable[[int], int]:
    return lambda n: low + n


def at_high(low: int, high: int) -> Callable[[int], int]:
    return lambda n: high - (IDS - 1) + n


def at_both_ends(low: int, high: int) -> Callable[[int], int]:
    """Half the ids at the type's minimum, half at its maximum: the whole range."""
    return lambda n: low + n if n < IDS // 2 else high - (IDS - 1) + n


def as_csv(log: pl.DataFrame) -> str:
    lines = (f"{u},{i},{t}" for u, i, t in log.iter_rows())
    return "user_id,item_id,timestamp\n" + "\n".join(lines) + "\n"


def prepared(tmp_path: Path, src: Path, **cfg) -> dict[str, pl.DataFrame]:
    out = tmp_path / src.stem
    prepare({"input": src, "output": out, **PREP, **cfg})
    files = (schema.SEQUENCES_FILE, schema.USERS_FILE, schema.ITEMS_FILE)
    return {name: pl.read_parquet(out / name) for name in files}


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> dict[str, pl.DataFrame]:
    """The small log's prepared files: what every mapped log must prepare into."""
    tmp_path = tmp_path_factory.mktemp("small")
    return prepared(tmp_path, write(tmp_path, "small.csv", as_csv(small_log())))


def assert_same_as_small(
    got: dict[str, pl.DataFrame], small: dict[str, pl.DataFrame], to: Callable[[int], object]
) -> None:
    """The same sequences, and every original id the map's image of the small one."""
    assert got[schema.SEQUENCES_FILE].equals(small[schema.SEQUENCES_FILE])
    for name in (schema.USERS_FILE, schema.ITEMS_FILE):
        expected = [to(n) for n in small[name][schema.ORIGINAL_ID]]
        assert got[name][schema.ORIGINAL_ID].to_list() == expected, name
        same = [c for c in small[name].columns if c != schema.ORIGINAL_ID]
        assert got[name].select(same).equals(small[name].select(same)), name


def histories_by_id(files: dict[str, pl.DataFrame]) -> dict[object, list]:
    """Each user's prepared history, user and items by their original ids."""
    users, items = (
        dict(files[name].select(index, schema.ORIGINAL_ID).iter_rows())
        for name, index in ((schema.USERS_FILE, schema.USER), (schema.ITEMS_FILE, schema.ITEM))
    )
    seqs = files[schema.SEQUENCES_FILE]
    return {
        users[user]: [items[i] for i in history]
        for user, history in zip(seqs[schema.USER], seqs[schema.ITEMS].to_list(), strict=True)
    }


PLACES = [at_low, at_high, at_both_ends]
INTEGER_CASES = [
    pytest.param(dtype, place, id=f"{dtype}-{place.__name__}")
    for dtype in LIMITS
    for place in PLACES
]


# ---------------------------------------------------------------- prep at the limits


@pytest.mark.parametrize("dtype, place", INTEGER_CASES)
def test_parquet_ids_at_the_limits_of_their_type(tmp_path, small, dtype, place):
    to = place(*LIMITS[dtype])
    src = tmp_path / "log.parquet"
    mapped(small_log(), to, dtype).write_parquet(src)
    got = prepared(tmp_path, src, format="parquet")
    assert_same_as_small(got, small, to)
    assert got[schema.USERS_FILE][schema.ORIGINAL_ID].dtype == dtype  # the log's own type


@pytest.mark.parametrize("dtype, place", INTEGER_CASES)
def test_csv_ids_at_the_limits_of_each_integer_type(tmp_path, small, dtype, place):
    """The same values as csv text: read as Int64, or Int128 beyond it (UInt64's top)."""
    to = place(*LIMITS[dtype])
    src = write(tmp_path, "log.csv", as_csv(mapped(small_log(), to, pl.Int128)))
    assert_same_as_small(prepared(tmp_path, src), small, to)


@pytest.mark.parametrize(
    "to",
    [
        lambda n: 2**63 + n,  # just beyond Int64
        lambda n: 2**64 + n,  # just beyond UInt64
        lambda n: -(2**63) - IDS + n,  # just below Int64
        at_both_ends(-(2**127), 2**127 - 1),  # Int128's whole range
    ],
    ids=["2**63", "2**64", "below-int64", "int128-range"],
)
def test_csv_integer_ids_beyond_64_bits(tmp_path, small, to):
    src = write(tmp_path, "log.csv", as_csv(mapped(small_log(), to, pl.Int128)))
    assert_same_as_small(prepared(tmp_path, src), small, to)


def test_the_reported_snowflake_ids_in_several_parts(tmp_path, small):
    """18446744073709551000 + n, the reported log, through the partitioned job too."""
    to = at_low(REPORTED, 2**64 - 1)
    src = write(tmp_path, "log.csv", as_csv(mapped(small_log(), to, pl.Int128)))
    assert_same_as_small(prepared(tmp_path, src), small, to)
    assert_same_as_small(prepared(tmp_path, src, partitions=3), small, to)


@pytest.mark.parametrize(
    "written, canonical",
    [
        (lambda n: f"{n:020d}", lambda n: str(n)),  # leading zeros: the integer n
        (lambda n: f"000{10**30 + n}", lambda n: str(10**30 + n)),  # 31 digits, padded
        (lambda n: "9" * 45 + str(n), lambda n: "9" * 45 + str(n)),  # beyond every integer type
        (lambda n: f"-{10**25 - n:026d}", lambda n: str(-(10**25) + n)),  # negative, padded
    ],
    ids=["leading-zeros", "31-digits", "46-digits", "negative"],
)
def test_text_ids_in_parquet(tmp_path, small, written, canonical):
    """A text column: each id canonical (:mod:`data_prep.ids`), kept as text; users are
    numbered in the text's order, so the histories are compared by id."""
    src = tmp_path / "log.parquet"
    mapped(small_log(), written, pl.String).write_parquet(src)
    got = histories_by_id(prepared(tmp_path, src, format="parquet"))
    assert got == {
        canonical(user): [canonical(item) for item in items]
        for user, items in histories_by_id(small).items()
    }


def test_zero_padded_csv_ids_are_the_integers(tmp_path, small):
    src = write(tmp_path, "log.csv", as_csv(mapped(small_log(), lambda n: f"{n:020d}", pl.String)))
    assert_same_as_small(prepared(tmp_path, src), small, lambda n: n)


def forty_one_digits(n: int) -> str:
    return str(10**40 + n)


def late_uint64_ids() -> str:
    """The small log's ids at UInt64's top, after more rows of small one-event users than
    the csv reader infers the column's type from."""
    filler = pl.DataFrame(
        {"user_id": range(100, 100 + INFER_ROWS), "item_id": 100, "timestamp": 1},
        schema={"user_id": pl.Int128, "item_id": pl.Int128, "timestamp": pl.Int64},
    )
    late = mapped(small_log(), at_high(*LIMITS[pl.UInt64]), pl.Int128)
    return as_csv(pl.concat([filler, late]))


@pytest.mark.xfail(
    strict=True,
    reason="the csv reader infers an integer column from its first rows and refuses an id "
    "that the inferred type does not hold, where the id policy reads it as text",
)
@pytest.mark.parametrize(
    "log, to",
    [
        (lambda: as_csv(mapped(small_log(), forty_one_digits, pl.String)), forty_one_digits),
        (late_uint64_ids, at_high(*LIMITS[pl.UInt64])),
    ],
    ids=["beyond-int128", "late-uint64"],
)
def test_csv_integer_ids_beyond_the_inferred_type(tmp_path, small, log, to):
    """The same sequences and ids, as integers or as text (the policy's "14" is 14)."""
    got = prepared(tmp_path, write(tmp_path, "log.csv", log()))
    assert got[schema.SEQUENCES_FILE].equals(small[schema.SEQUENCES_FILE])
    for name in (schema.USERS_FILE, schema.ITEMS_FILE):
        expected = [str(to(n)) for n in small[name][schema.ORIGINAL_ID]]
        assert got[name][schema.ORIGINAL_ID].cast(pl.String).to_list() == expected


def test_float_ids_up_to_the_exact_float_limit(tmp_path):
    """A float column holds every integer exactly up to 2**53: those are ids; beyond, a
    float may not be the id written, and the refusal names the column."""
    exact = pl.DataFrame({"user_id": [2.0**53] * 2, "item_id": [1.0, 2.0], "timestamp": [1, 2]})
    exact.write_parquet(tmp_path / "exact.parquet")
    got = prepared(tmp_path, tmp_path / "exact.parquet", format="parquet", min_item_events=1)
    assert got[schema.USERS_FILE][schema.ORIGINAL_ID].to_list() == [2**53]
    beyond = exact.with_columns(pl.col("item_id") + 2.0**53)
    src = write(tmp_path, "beyond.parquet", beyond)
    refused(tmp_path, src, ["'item_id'", "beyond.parquet"], format="parquet")


def test_an_item_table_of_uint64_ids_meets_the_same_ids_in_a_csv_log(tmp_path, small):
    to = at_high(*LIMITS[pl.UInt64])
    src = write(tmp_path, "log.csv", as_csv(mapped(small_log(), to, pl.Int128)))
    ids = pl.Series([to(n) for n in range(IDS)], dtype=pl.UInt64)
    table = pl.DataFrame({"item_id": ids, "brand": [f"b{n % 3}" for n in range(IDS)]})
    fmt = {"reader": "parquet", "categorical": ["brand"]}
    got = prepared(tmp_path, src, items=write(tmp_path, "items.parquet", table), items_format=fmt)
    assert_same_as_small(got, small, to)
    assert (got[schema.ITEMS_FILE]["brand"] != 0).all()  # every item found its row


def test_the_cli_prepares_the_reported_log(tmp_path):
    """``recsys-prep`` on the reported ids: exit 0, no traceback (it was a Polars error)."""
    to = at_low(REPORTED, 2**64 - 1)
    write(tmp_path, "log.csv", as_csv(mapped(small_log(), to, pl.Int128)))
    res = run_cli("recsys-prep", ["input=log.csv", "output=out", "min_user_events=2"], tmp_path)
    must_succeed(res)
    assert "Traceback" not in res.stderr
    users = pl.read_parquet(tmp_path / "out" / schema.USERS_FILE)[schema.ORIGINAL_ID]
    assert users.to_list() == [to(n) for n in range(6)]


# ---------------------------------------------------------------- the catalogue's forms

# ids of each form a prepared folder may hold, and the type a stored catalogue gives back
ID_FORMS = {
    "Int8": (pl.Series([-128, 0, 127], dtype=pl.Int8), pl.Int64),
    "Int64": (pl.Series([-(2**63), 0, 2**63 - 1], dtype=pl.Int64), pl.Int64),
    "UInt32": (pl.Series([0, 1, 2**32 - 1], dtype=pl.UInt32), pl.Int64),
    "UInt64": (pl.Series([2**63, 0, 2**64 - 1], dtype=pl.UInt64), pl.UInt64),
    "Int128": (pl.Series([-(2**127), 2**64, 2**127 - 1], dtype=pl.Int128), pl.Int128),
    "String": (pl.Series(["9" * 45, "-7", "A-1"], dtype=pl.String), pl.String),
}


def catalogue_of(ids: pl.Series) -> Catalogue:
    return Catalogue(ids.rename(schema.ORIGINAL_ID), np.arange(len(ids) + 1), {})


@pytest.mark.parametrize("form", ID_FORMS)
def test_a_stored_catalogue_gives_back_its_ids(form):
    """Through a checkpoint's record and an exported program's JSON: the same ids, of the
    same type (narrower integers than int64 come back as Int64)."""
    ids, dtype = ID_FORMS[form]
    catalogue, fingerprint = catalogue_of(ids), item_fingerprint(ids)
    from_checkpoint = Catalogue.from_record(catalogue.record(), len(ids), fingerprint)
    as_json = json.loads(json.dumps(catalogue.json_record()))
    from_json = Catalogue.from_json_record(as_json, len(ids), fingerprint)
    for back in (from_checkpoint, from_json):
        assert back.original_ids.to_list() == ids.to_list()
        assert back.ids(np.array([3, 1])).to_list() == [ids[2], ids[0]]
        assert back.original_ids.dtype == dtype


def test_the_item_fingerprint_is_the_same_for_every_form_of_the_ids():
    forms = [pl.Int64, pl.UInt64, pl.Int128, pl.String]
    ids = [2**62, 0, 7]
    prints = {item_fingerprint(pl.Series(ids).cast(dtype)) for dtype in forms}
    assert len(prints) == 1
    assert item_fingerprint(pl.Series(ids[::-1])) not in prints  # the order is part of it


@pytest.mark.parametrize(
    "change, message",
    [
        ({"original_id_type": "Float64"}, "original_id_type 'Float64' is none of"),
        ({"original_ids": ["1", "x", "3"]}, "not all UInt64 values"),
        ({"original_ids": ["1", "-2", "3"]}, "not all UInt64 values"),
        ({"original_ids": [1, 2, 3]}, "not decimal strings"),
        ({"original_ids": ["0", "1", "2"]}, "do not match the model's fingerprint"),
    ],
)
def test_a_damaged_wide_id_record_is_refused(change, message):
    ids, _ = ID_FORMS["UInt64"]
    record = catalogue_of(ids).record() | change
    with pytest.raises(CatalogueError, match=message):
        Catalogue.from_record(record, len(ids), item_fingerprint(ids))


# ---------------------------------------------------------------- trained and served

K = 5


@pytest.fixture(scope="module")
def u64_run(tmp_path_factory) -> tuple[Path, Path, pl.DataFrame]:
    """A parquet log of UInt64 ids beyond int64 (users up to 2**64 - 1, items from 2**63),
    prepared and trained for a few batches: (data folder, checkpoint, the log)."""
    tmp_path = tmp_path_factory.mktemp("u64")
    rng = np.random.default_rng(0)
    users, events = 300, 6_000
    user = rng.integers(0, users, events)
    item = (user * 7 + rng.integers(0, 40, events)) % 150  # some structure to learn
    log = pl.DataFrame(
        {
            "user_id": np.uint64(2**64 - users) + user.astype(np.uint64),
            "item_id": np.uint64(2**63) + item.astype(np.uint64),
            "timestamp": np.arange(events),
        }
    )
    log.write_parquet(tmp_path / "log.parquet")
    data = tmp_path / "data"
    prepare({"input": tmp_path / "log.parquet", "output": data, "format": "parquet"})
    return data, short_checkpoint(tmp_path / "run", data), log


def test_uint64_ids_round_trip_through_training(u64_run):
    data, ckpt, log = u64_run
    items = pl.read_parquet(data / schema.ITEMS_FILE)[schema.ORIGINAL_ID]
    users = pl.read_parquet(data / schema.USERS_FILE)[schema.ORIGINAL_ID]
    assert items.dtype == users.dtype == pl.UInt64
    assert set(items) == set(log["item_id"]) and set(users) == set(log["user_id"])
    catalogue = open_checkpoint(ckpt).served_catalogue()  # was refused: fingerprint
    assert catalogue.original_ids.dtype == pl.UInt64
    assert catalogue.original_ids.equals(items)


def test_uint64_ids_are_served_in_original_ids(tmp_path, u64_run):
    """``recsys-recommend`` and the Python API name the same items for a user, in the log's
    UInt64 ids, whichever form (int, numpy uint64, zero-padded text) the history is in."""
    data, ckpt, log = u64_run
    known, unknown = int(log["user_id"].max()), 2**63  # 2**64 - 1, and an id nobody has
    (tmp_path / "users.txt").write_text(f"000{known}\n{unknown}\n")
    cfg = compose_config(
        "recommend",
        tmp_path / "recommend",
        [f"ckpt_path={ckpt}", f"k={K}", f"users={tmp_path / 'users.txt'}", "unknown=popular"],
    )
    frame, _ = recommend(cfg, show_progress=False)
    assert frame["user_id"].dtype == frame["item_id"].dtype == pl.UInt64
    assert frame["user_id"].unique(maintain_order=True).to_list() == [known, unknown]
    assert set(frame["item_id"]) <= set(log["item_id"])

    model = recsys_seq.load(ckpt)
    history = histories(data, len(pl.read_parquet(data / schema.USERS_FILE)))[-1]  # the max id
    served = frame.filter(pl.col("source") == "model")["item_id"].to_list()
    for form in (history, list(np.array(history, dtype=np.uint64)), [f"00{i}" for i in history]):
        got = model.recommend(form, k=K)
        assert got.source == "model" and not got.unknown
        assert got.items == served
