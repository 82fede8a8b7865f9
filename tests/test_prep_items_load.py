"""A prepared folder with item attributes loads, and a damaged attribute column or description
is refused on load.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from data_prep import prepare, schema
from recsys_seq.data import PreparedSequences
from tests.helpers import ITEMS, META, assert_refused_on_load, case, column, meta_edit, table
from tests.helpers.items import GENERIC


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
