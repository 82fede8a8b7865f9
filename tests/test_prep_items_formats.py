"""Item formats: what a format names and how its reader takes a record's values; each MovieLens
built-in on a hand-written file in its exact shape and on the real files; the item options on
recsys-prep's command line.
"""

from __future__ import annotations

import gzip

import pytest
from polars.testing import assert_frame_equal

from data_prep import read_meta, schema
from data_prep.item_formats import ITEM_FORMAT_DIR, load_item_format
from recsys_seq.data import PreparedSequences
from tests.helpers import error_problems, must_succeed, run, run_cli, write
from tests.helpers.items import LOG, decoded, items_frame, vocab

# ---------------------------------------------------------------------------- formats


def test_a_mapping_names_only_what_differs_from_its_readers_generic_format():
    fmt = load_item_format({"reader": "jsonl", "multi": "tags"})
    assert fmt["id"] == "item_id" and fmt["multi"] == ["tags"] and fmt["multi_separator"] == "|"


def test_every_item_format_loads():
    names = sorted(p.stem for p in ITEM_FORMAT_DIR.glob("*.yaml"))
    assert {"csv", "tsv", "parquet", "jsonl"} <= set(names)
    assert {"movielens_dat", "movielens_csv", "movielens_100k"} <= set(names)
    for name in names:
        assert load_item_format(name)["name"] == name


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


# ---------------------------------------------------------------------------- the command


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
