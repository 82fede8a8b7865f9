"""Bad item tables and item options refused in one paragraph with nothing written: every record
is checked, not only the head the parser sniffs, and a failed table keeps the previous
output.
"""

from __future__ import annotations

import polars as pl
import pytest

from data_prep import PrepError
from tests.helpers import refused, run, write
from tests.helpers.items import LOG

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
