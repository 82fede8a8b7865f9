"""Item tables (``items=<file> items_format=<format>``): item attributes joined to the log's
items by the id policy, coded for items.parquet and described in meta.json; each MovieLens
built-in on a hand-written file in its exact shape and on the real files; bad tables refused
in one paragraph with nothing written; a damaged attribute column refused on load; a Dask
cluster gives the one-process result.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from test_prep_cluster import LOCAL_2, assert_same_dataset, synthetic_log

from data_prep import PrepError, prepare, read_meta, schema
from data_prep.item_formats import ITEM_FORMAT_DIR, load_item_format
from recsys_seq.data import PreparedSequences
from tests.helpers import (
    ITEMS,
    META,
    assert_refused_on_load,
    case,
    column,
    error_problems,
    meta_edit,
    must_succeed,
    refused,
    run,
    run_cli,
    table,
    write,
)

LOG = "user_id,item_id,timestamp\nu1,14,1\nu1,7,2\nu1,3,3\nu2,14,4\nu2,99,5\nu2,7,6\n"
GENERIC = {"reader": "csv", "categorical": ["brand"], "multi": ["genres"], "numeric": ["price"]}


def items_frame(tmp_path: Path) -> pl.DataFrame:
    """items.parquet as original id -> the other columns, by original id."""
    return pl.read_parquet(tmp_path / "out" / ITEMS).sort(schema.ORIGINAL_ID)


def by_id(tmp_path: Path, name: str) -> dict:
    frame = items_frame(tmp_path)
    return dict(zip(frame[schema.ORIGINAL_ID], frame[name].to_list(), strict=True))


def vocab(meta: dict, name: str) -> list[str]:
    return meta[schema.META_ITEM_ATTRIBUTES][name]["vocab"]


def decoded(tmp_path: Path, meta: dict, name: str) -> dict:
    """Attribute ``name`` per original id, codes turned back into their values."""
    words = vocab(meta, name)
    return {
        item: [words[c] for c in codes] if isinstance(codes, list) else words[codes]
        for item, codes in by_id(tmp_path, name).items()
    }


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


def test_a_mapping_names_only_what_differs_from_its_readers_generic_format():
    fmt = load_item_format({"reader": "jsonl", "multi": "tags"})
    assert fmt["id"] == "item_id" and fmt["multi"] == ["tags"] and fmt["multi_separator"] == "|"


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


# ---------------------------------------------------------------------------- bad tables


@pytest.mark.parametrize(
    ("content", "fmt", "fragments"),
    [
        pytest.param(
            "item_id,genres\n 014,a\n7,b\n14,c\n",
            {"multi": ["genres"]},
            ["items.csv, line 2 and line 4", "'14' is on two rows", "' 014'", "one row per item"],
            id="duplicate-rows",
        ),
        pytest.param(
            "item_id,price\n14,1\n7,abc\n99,x\n",
            {"numeric": ["price"]},
            ["items.csv, line 3", "'price' (in items_format.numeric) is 'abc'", "2 such rows"],
            id="non-numeric",
        ),
        pytest.param(
            "item_id,genres\n14,a\n,b\n",
            {"multi": ["genres"]},
            ["items.csv, line 3", "the item id (column 'item_id') is missing"],
            id="missing-id-value",
        ),
        pytest.param(
            "sku,genres\n14,a\n",
            {"multi": ["genres"]},
            ["items.csv has no column 'item_id'", "['sku', 'genres']", "items_format.id="],
            id="missing-id-column",
        ),
        pytest.param(
            "item_id;genres\n14;a\n",
            {"multi": ["genres"]},
            ["items.csv, line 1", "no ',' separator", "items_format.separator=';'"],
            id="wrong-separator",
        ),
        pytest.param(
            "item_id,genres\n14,a\n7,b,c\n",
            {"multi": ["genres"]},
            ["items.csv, line 3", "3 fields separated by ','"],
            id="extra-field",
        ),
        pytest.param(
            b"\x00\x01binary",
            {"multi": ["genres"]},
            ["items.csv looks binary"],
            id="binary",
        ),
        pytest.param(
            "item_id,genres\n1000,a\n1001,b\n",
            {"multi": ["genres"]},
            ["items.csv holds none of the 4 items of", "'1000', '1001'", "items_format.id"],
            id="no-item-of-the-log",
        ),
        pytest.param(
            "item_id,genres,brand\n14,a,b\n",
            {},
            ["names no attribute column of item table", "['item_id', 'genres', 'brand']"],
            id="no-attributes",
        ),
        pytest.param(
            "item_id,count\n14,3\n",
            {"numeric": ["count"]},
            ["attribute 'count', a column items.parquet has already"],
            id="reserved-name",
        ),
        pytest.param(
            "item_id,_item_id_text\n14,a\n",
            {"categorical": ["_item_id_text"]},
            ["names the column '_item_id_text'", "start with '_'"],
            id="working-column-name",
        ),
        pytest.param(
            "_first,g\n14,a\n14,b\n",
            {"id": "_first", "multi": ["g"]},
            ["names the column '_first'"],
            id="working-column-name-as-id",
        ),
        pytest.param(
            "item_id,genres\n\n",
            {"multi": ["genres"]},
            ["Item table", "items.csv has no rows"],
            id="header-only",
        ),
        pytest.param(
            "item_id,g\n14,a\n",
            {"multi": ["g"], "categorical": ["g"]},
            ["names the attribute 'g' twice"],
            id="two-kinds",
        ),
        pytest.param(
            "item_id,flag\n14,2\n",
            {"flags": {"genres": ["flag"]}},
            ["items.csv, line 2", "'flag' (in items_format.flags.genres) is '2', not a 0/1"],
            id="bad-flag",
        ),
    ],
)
def test_a_bad_item_table_is_one_paragraph_and_nothing_is_written(
    tmp_path, content, fmt, fragments
):
    log = write(tmp_path, "log.csv", LOG)
    table_file = write(tmp_path, "items.csv", content)
    refused(tmp_path, log, fragments, items=table_file, items_format={"reader": "csv", **fmt})


GOOD_ROWS = "".join(f"{1000 + i},Drama,{i}\n" for i in range(5000))  # past the sniffed head
DAT_ROWS = "".join(f"{1000 + i}::Film {i} (1999)::Drama\n" for i in range(4000))


@pytest.mark.parametrize(
    ("name", "content", "fmt", "fragments"),
    [
        pytest.param(
            "items.csv",
            "item_id,genres,price\n14,Action,1\n" + GOOD_ROWS + "7,Comedy\n",
            {"multi": ["genres"], "numeric": ["price"]},
            ["items.csv, line 5003", "2 fields separated by ','", "the header (line 1) has 3"],
            id="late-short-row",
        ),
        pytest.param(
            "items.csv",
            "item_id,genres,price\n14,Action,1\n" + GOOD_ROWS + "7,Comedy,1,2\n",
            {"multi": ["genres"], "numeric": ["price"]},
            ["items.csv, line 5003", "4 fields"],
            id="late-long-row",
        ),
        pytest.param(
            "items.csv",
            'item_id,genres,price\n14,"Action\nComedy",1\n7,"a,b",2\n99,c\n',
            {"multi": ["genres"], "numeric": ["price"]},
            ["items.csv, line 5:", "2 fields"],  # quoted newline and comma: one record each
            id="short-row-after-quoted-fields",
        ),
        pytest.param(
            "movies.dat",
            "14::T (1995)::Action\n" + DAT_ROWS + "7::A::B (1999)::Comedy\n",
            "movielens_dat",
            ["movies.dat, line 4002", "4 fields separated by '::'", "names"],
            id="late-dat-line-with-an-extra-field",
        ),
        pytest.param(
            "movies.dat",
            "14::T (1995)::Action\n" + DAT_ROWS + "7::Comedy\n",
            "movielens_dat",
            ["movies.dat, line 4002", "2 fields"],
            id="late-dat-line-short",
        ),
        pytest.param(
            "movies.dat",
            b"\xef\xbb\xbf14::T (1995)::Action\n7::U (1996)::Comedy\n",
            "movielens_dat",
            ["movies.dat starts with a UTF-8 byte-order mark", "items_format.encoding=utf-8"],
            id="bom-in-a-latin-1-table",
        ),
        pytest.param(
            "items.csv",
            b"item_id,genres,price\n14,Action,1\n" + GOOD_ROWS.encode() + b"7,Com\xe9die,2\n",
            {"multi": ["genres"], "numeric": ["price"]},
            ["items.csv, line 5003", "not utf-8 text", "items_format.encoding"],
            id="late-byte-that-is-not-utf-8",
        ),
        pytest.param(
            "items.jsonl",
            b'{"item_id": 14, "genres": "a"}\n' * 6000 + b'{"item_id": 7, "genres": "\xe9"}\n',
            {"reader": "jsonl", "multi": ["genres"]},
            ["items.jsonl, line 6001", "not utf-8 text"],
            id="late-byte-that-is-not-utf-8-in-json-lines",
        ),
        pytest.param(
            "items.jsonl",
            '{"item_id": 14, "brand": "x"}\n\n{"item_id": 7, "brand": ["y", "z"]}\n',
            {"reader": "jsonl", "categorical": ["brand"]},
            ["items.jsonl, line 3", "'brand' holds '[", "an array or object"],
            id="json-list-among-texts",
        ),
        pytest.param(
            "items.jsonl",
            '{"item_id": 14, "genres": "c|d"}\n' * 10_001 + '{"item_id": 7, "genres": {"x": 1}}\n',
            {"reader": "jsonl", "multi": ["genres"]},
            ["items.jsonl, line 10002", "an array or object"],
            id="late-json-object-among-texts",
        ),
        pytest.param(
            "items.csv",
            'item_id,genres,brand\n14,"a\nb",x\n7,c,y\n99,d,z\n7,e,w\n',
            {"multi": ["genres"], "categorical": ["brand"]},
            ["items.csv, line 4 and line 6", "the item id '7' is on two rows"],
            id="lines-after-a-quoted-newline",
        ),
        pytest.param(
            "items.csv",
            "item_id,genres,genres\n14,a,b\n7,c,d\n",
            {"multi": ["genres"]},
            ["items.csv, line 1", "names the column 'genres' twice"],
            id="repeated-header-name",
        ),
        pytest.param(
            "items.csv",
            "item_id,item_id,genres\n14,a,b\n",
            {"multi": ["genres"]},
            ["names the column 'item_id' twice"],
            id="repeated-id-column",
        ),
    ],
)
def test_every_record_of_an_item_table_is_checked_not_only_its_head(
    tmp_path, name, content, fmt, fragments
):
    """A record the parser would silently pad with nulls or shift is refused, wherever it is,
    and lines are counted as the parser reads records (a quoted newline is one record)."""
    log = write(tmp_path, "log.csv", LOG)
    table_file = write(tmp_path, name, content)
    fmt = fmt if isinstance(fmt, str) else {"reader": "csv", **fmt}
    refused(tmp_path, log, fragments, items=table_file, items_format=fmt)


def test_json_text_that_looks_like_a_list_is_text(tmp_path):
    """Only a JSON array is an array: the text "[x]" is one value, as is a list column."""
    log = write(tmp_path, "log.csv", LOG)
    lines = ['{"item_id": 14, "brand": "[x]", "tags": ["a", "b"], "note": {"brand": [1]}}']
    lines += ['{"item_id": 7, "brand": "y", "tags": ["b"], "note": {"brand": [2]}}']
    table_file = write(tmp_path, "items.jsonl", "\n".join(lines) + "\n")
    fmt = {"reader": "jsonl", "categorical": ["brand"], "multi": ["tags"]}
    meta = run(tmp_path, log, items=table_file, items_format=fmt)
    assert decoded(tmp_path, meta, "brand") == {14: "[x]", 7: "y", 3: "<pad>", 99: "<pad>"}
    assert decoded(tmp_path, meta, "tags") == {14: ["a", "b"], 7: ["b"], 3: [], 99: []}


def test_a_column_the_format_does_not_read_may_have_any_name(tmp_path):
    log = write(tmp_path, "log.csv", LOG)
    table_file = write(tmp_path, "items.csv", "item_id,_row,genres\n14,x,a\n7,y,b\n")
    meta = run(tmp_path, log, items=table_file, items_format={"multi": ["genres"]})
    assert decoded(tmp_path, meta, "genres") == {14: ["a"], 7: ["b"], 3: [], 99: []}


def test_quoted_separators_and_newlines_are_values_not_fields(tmp_path):
    log = write(tmp_path, "log.csv", LOG)
    table_file = write(
        tmp_path, "items.csv", 'item_id,brand,price\n14,"a, b",1\n7,"x\ny ""z""",2\n99,c,3\n'
    )
    meta = run(
        tmp_path,
        log,
        items=table_file,
        items_format={"categorical": ["brand"], "numeric": ["price"]},
    )
    assert decoded(tmp_path, meta, "brand") == {
        14: "a, b",
        7: 'x\ny "z"',
        99: "c",
        3: "<pad>",
    }


def test_a_float_id_that_is_no_id_is_refused_naming_its_row(tmp_path):
    log = write(tmp_path, "log.csv", LOG)
    bad = write(tmp_path, "items.parquet", pl.DataFrame({"item_id": [14.0, 1.5], "g": ["a", "b"]}))
    fmt = {"reader": "parquet", "multi": ["g"]}
    refused(tmp_path, log, ["items.parquet, row 2", "1.5, a float"], items=bad, items_format=fmt)


@pytest.mark.parametrize(
    ("items", "fmt", "fragments"),
    [
        ("missing.csv", "csv", ["Input file not found", "missing.csv", "items_format 'csv'"]),
        (".", "csv", ["is a folder", "item table"]),
        ("log.csv", "nonesuch", ["Unknown items_format 'nonesuch'", "movielens_dat"]),
        (None, "movielens_dat", ["items_format=movielens_dat needs items=<item table file>"]),
        ("log.csv", {"encoding": "klingon"}, ["items_format.encoding='klingon'"]),
        ("", "csv", ["Option items must be the item table's path, got ''"]),
        ("  ", "csv", ["must be the item table's path"]),
    ],
)
def test_wrong_item_options_are_refused_before_any_work(tmp_path, items, fmt, fragments):
    log = write(tmp_path, "log.csv", LOG)
    path = None if items is None else str(tmp_path / items) if items.strip() else items
    refused(tmp_path, log, fragments, items=path, items_format=fmt)


def test_a_failed_item_table_keeps_the_previous_output(tmp_path):
    log = write(tmp_path, "log.csv", LOG)
    good = write(tmp_path, "items.csv", "item_id,genres\n14,a\n")
    run(tmp_path, log, items=good, items_format={"multi": ["genres"]})
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    bad = write(tmp_path, "bad.csv", "item_id,genres\n14,a\n14,b\n")
    with pytest.raises(PrepError, match="on two rows"):
        run(tmp_path, log, items=bad, items_format={"multi": ["genres"]})
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before


# ---------------------------------------------------------------------------- MovieLens


def test_movies_dat_latin1_double_colon(tmp_path):
    """ML-1M: MovieID::Title::Genres, no header, latin-1 (a title with an accent)."""
    ratings = write(tmp_path, "ratings.dat", "1::1::5::978300760\n1::73::4::978300761\n")
    movies = write(
        tmp_path,
        "movies.dat",
        "1::Toy Story (1995)::Animation|Children's|Comedy\n"
        "2::Jumanji (1995)::Adventure|Children's|Fantasy\n"
        "73::Misérables, Les (1995)::Drama|Musical\n".encode("latin-1"),
    )
    meta = run(
        tmp_path, ratings, format="movielens_dat", items=movies, items_format="movielens_dat"
    )
    assert decoded(tmp_path, meta, "genres") == {
        1: ["Animation", "Children's", "Comedy"],
        73: ["Drama", "Musical"],
    }
    assert meta[schema.META_ITEM_TABLE]["not_in_log"] == 1
    before = items_frame(tmp_path)
    packed = write(tmp_path, "movies.dat.gz", gzip.compress(movies.read_bytes()))
    run(tmp_path, ratings, format="movielens_dat", items=packed, items_format="movielens_dat")
    assert_frame_equal(items_frame(tmp_path), before)  # .gz allowed, decoded the same


def test_movies_csv_quoted_titles_and_no_genres(tmp_path):
    """ml-latest / 20M / 25M: a header, a quoted title holding commas, "(no genres listed)"."""
    ratings = write(
        tmp_path,
        "ratings.csv",
        "userId,movieId,rating,timestamp\n1,1,4.0,964982703\n1,11,4.0,964981247\n"
        "1,114335,3.5,964982224\n",
    )
    movies = write(
        tmp_path,
        "movies.csv",
        "movieId,title,genres\n1,Toy Story (1995),Adventure|Animation|Children|Comedy|Fantasy\n"
        '11,"American President, The (1995)",Comedy|Drama|Romance\n'
        "114335,La cravate (1957),(no genres listed)\n",
    )
    meta = run(
        tmp_path, ratings, format="movielens_csv", items=movies, items_format="movielens_csv"
    )
    genres = decoded(tmp_path, meta, "genres")
    assert genres[11] == ["Comedy", "Drama", "Romance"] and genres[114335] == []
    assert "(no genres listed)" not in vocab(meta, "genres")


UITEM_GENRES = load_item_format("movielens_100k")["flags"]["genres"]


def test_u_item_genre_flags_become_one_multi_column(tmp_path):
    """ML-100K u.item: '|' separated, latin-1, an empty video release date, 19 genre flags."""
    ratings = write(tmp_path, "u.data", "196\t1\t3\t881250949\n196\t267\t3\t881250950\n")
    flags_1 = "|".join(
        "1" if g in ("Animation", "Children's", "Comedy") else "0" for g in UITEM_GENRES
    )
    flags_267 = "|".join("1" if g == "unknown" else "0" for g in UITEM_GENRES)
    movies = write(
        tmp_path,
        "u.item",
        f"1|Toy Story (1995)|01-Jan-1995||http://us.imdb.com/M/title-exact?Toy%20Story%20(1995)"
        f"|{flags_1}\n267|unknown||||{flags_267}\n"
        f"1682|Scream of Stone (Schrei aus Stein) (1991)|08-Mar-1996||http://x|{flags_267}\n".encode(
            "latin-1"
        ),
    )
    meta = run(
        tmp_path, ratings, format="movielens_100k", items=movies, items_format="movielens_100k"
    )
    assert decoded(tmp_path, meta, "genres") == {
        1: ["Animation", "Children's", "Comedy"],
        267: ["unknown"],
    }
    assert len(UITEM_GENRES) == 19


MOVIELENS = [
    pytest.param(
        "movielens-1m/ratings_users0001-2999.dat.gz",
        "movielens_dat",
        "movielens-1m/movies.dat",
        (3_883, 3_615, 18),
        id="ml-1m-movies.dat",
    ),
    pytest.param(
        "movielens-100k/u.data",
        "movielens_100k",
        "movielens-100k/u.item",
        (1_682, 1_682, 19),
        id="ml-100k-u.item",
    ),
    pytest.param(
        "movielens-latest-small/ratings.csv",
        "movielens_csv",
        "movielens-latest-small/movies.csv",
        (9_742, 9_724, 19),
        id="ml-latest-small-movies.csv",
    ),
]


@pytest.mark.shared_data
@pytest.mark.parametrize(("log", "fmt", "movies", "expected"), MOVIELENS)
def test_real_movielens_item_tables(tmp_path, shared_data, log, fmt, movies, expected):
    """The real files (the shared_data fixture fails in CI when they are missing): every
    rated movie has its row, and its genres are the file's."""
    rows, items, genres = expected
    meta = run(
        tmp_path,
        shared_data / log,
        format=fmt,
        items=shared_data / movies,
        items_format=fmt,
        max_len=100_000,
    )
    report = meta[schema.META_ITEM_TABLE]
    assert (report["rows"], report["matched"], report["without_row"]) == (rows, items, 0)
    assert meta["items"] == items and report["not_in_log"] == rows - items
    assert meta[schema.META_ITEM_ATTRIBUTES]["genres"]["size"] == genres + 1
    PreparedSequences.load(tmp_path / "out")


@pytest.mark.shared_data
def test_ml1m_genres_are_those_of_movies_dat(tmp_path, shared_data):
    movies = shared_data / "movielens-1m" / "movies.dat"
    meta = run(
        tmp_path,
        shared_data / "movielens-1m" / "ratings_users0001-2999.dat.gz",
        format="movielens_dat",
        items=movies,
        items_format="movielens_dat",
    )
    lines = movies.read_bytes().decode("latin-1").splitlines()
    expected = {int(i): g.split("|") for i, _, g in (line.split("::") for line in lines)}
    genres = decoded(tmp_path, meta, "genres")
    assert genres == {item: expected[item] for item in genres}
    assert genres[1] == ["Animation", "Children's", "Comedy"]


def test_recsys_prep_with_an_item_table_prints_how_it_joined(tmp_path):
    write(tmp_path, "log.csv", LOG)
    write(tmp_path, "items.csv", "sku,tags,price\n14,x|y,3\n7,y,4\n500,z,1\n")
    args = [
        "input=log.csv",
        "output=out",
        "min_user_events=1",
        "items=items.csv",
        "items_format=csv",
        "items_format.id=sku",
        "items_format.multi=[tags]",
        "items_format.numeric=price",
        "item_buckets=3",
    ]
    res = run_cli("recsys-prep", args, tmp_path)
    must_succeed(res)
    assert "reading the item table items.csv" in res.stderr
    for row in ("item rows matched / not in the log", "2 / 1", "items without a row"):
        assert row in res.stdout
    assert "tags (multi, 3), price (numeric-bucketed, 3)" in res.stdout  # 3 and 4: 2 buckets
    meta = read_meta(tmp_path / "out")
    assert meta["config"]["items_format"]["id"] == "sku"
    wrong = run_cli("recsys-prep", ["input=log.csv", "output=o2", "items_format=csv"], tmp_path)
    assert error_problems("recsys-prep", wrong, ["items_format=csv needs items="]) == []


def test_the_advice_for_a_table_without_attributes_is_a_command_that_works(tmp_path):
    """``items=`` alone reads csv with no attribute named: the message's words, appended to
    the same command, prepare the folder."""
    write(tmp_path, "log.csv", LOG)
    write(tmp_path, "items.csv", "item_id,tags\n14,x|y\n7,y\n")
    args = ["input=log.csv", "output=out", "min_user_events=1", "items=items.csv"]
    advised = "items_format=csv items_format.id=<column> and items_format.categorical=[...]"
    first = run_cli("recsys-prep", args, tmp_path)
    assert error_problems("recsys-prep", first, [advised, "['item_id', 'tags']"]) == []
    fixed = run_cli(
        "recsys-prep", [*args, "items_format=csv", "items_format.multi=[tags]"], tmp_path
    )
    must_succeed(fixed)
    assert "tags (multi, 3)" in fixed.stdout  # x, y and the missing code


def test_every_item_format_loads():
    names = sorted(p.stem for p in ITEM_FORMAT_DIR.glob("*.yaml"))
    assert {"csv", "tsv", "parquet", "jsonl"} <= set(names)
    assert {"movielens_dat", "movielens_csv", "movielens_100k"} <= set(names)
    for name in names:
        assert load_item_format(name)["name"] == name


# ---------------------------------------------------------------------------- on load


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A prepared folder with one attribute of each kind (the ``copy`` fixture of
    tests/conftest.py copies it)."""
    root = tmp_path_factory.mktemp("with_items")
    rows = [f"u{u},{10 + (u * 3 + t) % 8},{100 * u + t}" for u in range(6) for t in range(4)]
    (root / "log.csv").write_text("user_id,item_id,timestamp\n" + "\n".join(rows) + "\n")
    items = [f"{10 + i},g{i % 3}|g{(i + 1) % 3},b{i % 2},{i * 1.5}" for i in range(7)]
    (root / "items.csv").write_text("item_id,genres,brand,price\n" + "\n".join(items) + "\n")
    prepare(
        {"input": root / "log.csv", "output": root / "data", "min_user_events": 2,
         "items": root / "items.csv", "items_format": GENERIC}
    )  # fmt: skip
    return root / "data"


def attribute(name: str, key: str, value):
    return meta_edit(lambda m: m[schema.META_ITEM_ATTRIBUTES][name].__setitem__(key, value))


first_item = pl.col(schema.ITEM) == 1
LOAD_CASES = [
    case(
        column(ITEMS, "brand", pl.when(first_item).then(3).otherwise(pl.col("brand"))),
        ITEMS,
        "outside 0..2",
        "column 'brand'",
        id="categorical-beyond-vocab",
    ),
    case(
        column(ITEMS, "brand", pl.when(~first_item).then(pl.col("brand"))),
        ITEMS,
        "a missing code",
        "column 'brand'",
        id="categorical-null",
    ),
    case(
        column(ITEMS, "price", pl.col("price").cast(pl.Float64)),
        ITEMS,
        "column 'price' of type Float64",
        id="numeric-float",
    ),
    case(
        column(ITEMS, "genres", pl.col("genres").list.concat(pl.lit([0]))),
        ITEMS,
        "PAD",
        "inside a list of column 'genres'",
        id="multi-pad-inside",
    ),
    case(
        column(ITEMS, "genres", pl.col("genres").list.concat(pl.lit([9]))),
        ITEMS,
        "outside 1..3",
        "column 'genres'",
        id="multi-beyond-vocab",
    ),
    case(
        column(ITEMS, "genres", pl.when(~first_item).then(pl.col("genres"))),
        ITEMS,
        "a missing list in column 'genres'",
        id="multi-null-list",
    ),
    case(
        column(ITEMS, "genres", pl.col("genres").list.first()),
        ITEMS,
        "column 'genres' of type Int64; expected lists of Int64",
        id="multi-not-a-list",
    ),
    case(table(ITEMS, lambda f: f.drop("price")), ITEMS, "no column 'price'", id="no-column"),
    case(attribute("brand", "kind", "fuzzy"), META, "item_attributes.brand.kind", id="kind"),
    case(attribute("genres", "size", 9), META, "item_attributes.genres.vocab", id="size-vocab"),
    case(
        attribute("price", "edges", [3.0, 1.0]),
        META,
        "item_attributes.price.edges",
        "increasing",
        id="edges",
    ),
    case(
        meta_edit(lambda m: m[schema.META_ITEM_ATTRIBUTES]["genres"]["vocab"].__setitem__(0, "x")),
        META,
        "'<pad>'",
        id="vocab-without-pad",
    ),
]


@pytest.mark.parametrize(("corrupt", "file", "fragments"), LOAD_CASES)
def test_a_damaged_item_attribute_is_refused_on_load(copy, corrupt, file, fragments):
    assert_refused_on_load(copy, corrupt, file, fragments)


def test_the_prepared_folder_with_attributes_loads(prepared):
    meta = json.loads((prepared / META).read_text())
    assert set(meta[schema.META_ITEM_ATTRIBUTES]) == {"brand", "genres", "price"}
    PreparedSequences.load(prepared)


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
