"""PreparedSequences.load refuses prepared tables whose content is wrong, with one clear error.

A tiny dataset is prepared once with the real prep job (the ``prepared`` fixture,
tests/conftest.py); each test corrupts a copy of it in one way and checks the error: a
:class:`PreparedDataError` (a user error), one paragraph naming the broken file and the problem
and saying to prepare the data again. Here: items.parquet and users.parquet (columns, types,
indices, original ids) and sequences.parquet (columns and types; its rows: users, items, the
validation and test indices, side-feature lists and codes). (The folder, meta.json and the
files as files: tests/test_prepared_files.py.)
"""

from __future__ import annotations

import polars as pl
import pytest

from data_prep import schema
from tests.helpers import (
    FEATURES,
    ITEMS,
    SEQ,
    USERS,
    assert_refused_on_load,
    case,
    column,
    items_col,
    table,
)

# ---------------------------------------------------------------------------- corruptions


def at_user(user: int, expr: pl.Expr, col: str) -> pl.Expr:
    """``expr`` in user ``user``'s row, the column unchanged elsewhere."""
    return pl.when(pl.col(schema.USER) == user).then(expr).otherwise(pl.col(col))


def drop_columns(name: str, *cols: str):
    return table(name, lambda f: f.drop(*cols))


length = items_col.list.len()


CASES = [
    # -- items.parquet content
    case(
        drop_columns(ITEMS, schema.ORIGINAL_ID),
        ITEMS,
        "no column 'original_id'",
        id="items-no-original-id",
    ),
    case(drop_columns(ITEMS, schema.ITEM), ITEMS, "no column 'item'", id="items-no-item"),
    case(drop_columns(ITEMS, schema.COUNT), ITEMS, "no column 'count'", id="items-no-count"),
    case(
        column(ITEMS, "item", pl.col("item").cast(pl.Float64)),
        ITEMS,
        "column 'item' of type Float64",
        id="items-item-float",
    ),
    case(
        column(ITEMS, "item", pl.col("item").cast(pl.String)),
        ITEMS,
        "type String",
        id="items-item-string",
    ),
    case(
        column(ITEMS, "count", pl.col("count").cast(pl.String)),
        ITEMS,
        "column 'count' of type String",
        id="items-count-string",
    ),
    case(
        column(ITEMS, "original_id", pl.concat_list("original_id")),
        ITEMS,
        "column 'original_id' of type List",
        id="items-id-list",
    ),
    case(
        column(ITEMS, "item", pl.col("item") - 1), ITEMS, "not exactly 1..N", id="items-from-zero"
    ),
    case(table(ITEMS, lambda f: f.reverse()), ITEMS, "not exactly 1..N", id="items-reversed"),
    case(
        column(ITEMS, "item", pl.col("item").shift(1, fill_value=1)),
        ITEMS,
        "not exactly 1..N",
        id="items-duplicated-index",
    ),
    case(table(ITEMS, lambda f: f.head(-1)), ITEMS, "while meta.json says", id="items-row-dropped"),
    case(
        table(ITEMS, lambda f: pl.concat([f, f.tail(1)])),
        ITEMS,
        "while meta.json says",
        id="items-row-added",
    ),
    case(
        column(ITEMS, "original_id", pl.col("original_id").shift(1)),
        ITEMS,
        "missing 'original_id'",
        id="items-id-null",
    ),
    case(
        column(
            ITEMS,
            "original_id",
            pl.when(pl.int_range(pl.len()) == 0)
            .then(pl.col("original_id").get(1))
            .otherwise("original_id"),
        ),
        ITEMS,
        "'original_id' twice",
        id="items-id-duplicated",
    ),
    case(
        column(ITEMS, "original_id", pl.col("original_id").reverse()),
        ITEMS,
        "other than those the item_fingerprint",
        id="items-ids-reordered",
    ),
    case(
        column(ITEMS, "original_id", pl.col("original_id") + "x"),
        ITEMS,
        "item_fingerprint",
        id="items-ids-renamed",
    ),
    # -- users.parquet content
    case(drop_columns(USERS, schema.USER), USERS, "no column 'user'", id="users-no-user"),
    case(
        column(USERS, "user", pl.col("user").cast(pl.Float32)),
        USERS,
        "type Float32",
        id="users-user-float",
    ),
    case(
        column(USERS, "user", pl.col("user") + 1), USERS, "not exactly 0..U-1", id="users-from-one"
    ),
    case(table(USERS, lambda f: f.reverse()), USERS, "not exactly 0..U-1", id="users-reversed"),
    case(
        column(USERS, "user", pl.col("user").shift(1, fill_value=0)),
        USERS,
        "not exactly 0..U-1",
        id="users-duplicated-index",
    ),
    case(
        column(USERS, "original_id", pl.col("original_id").shift(1)),
        USERS,
        "missing 'original_id'",
        id="users-id-null",
    ),
    case(
        column(USERS, "original_id", pl.lit("u0")),
        USERS,
        "'original_id' twice",
        id="users-id-duplicated",
    ),
    # -- sequences.parquet columns and types
    *(
        case(drop_columns(SEQ, col), SEQ, f"no column '{col}'", id=f"sequences-no-{col}")
        for col in (
            schema.USER,
            schema.ITEMS,
            schema.TIMESTAMPS,
            schema.VAL_INDEX,
            schema.TEST_INDEX,
            *FEATURES,
        )
    ),
    case(
        column(SEQ, "items", items_col.cast(pl.List(pl.Float64))),
        SEQ,
        "column 'items' of type List(Float64)",
        "lists of Int64",
        id="items-float-list",
    ),
    case(
        column(SEQ, "items", items_col.cast(pl.List(pl.String))),
        SEQ,
        "column 'items' of type List(String)",
        id="items-string-list",
    ),
    case(
        column(SEQ, "items", items_col.list.first()),
        SEQ,
        "column 'items' of type Int64",
        id="items-not-a-list",
    ),
    case(
        column(SEQ, "items", items_col.cast(pl.List(pl.UInt64))),
        SEQ,
        "type List(UInt64)",
        id="items-uint64",
    ),
    case(
        column(SEQ, "timestamps", pl.col("timestamps").cast(pl.List(pl.String))),
        SEQ,
        "column 'timestamps' of type",
        id="timestamps-strings",
    ),
    case(
        column(SEQ, "val_index", pl.col("val_index").cast(pl.Float64)),
        SEQ,
        "column 'val_index' of type Float64",
        id="val-float",
    ),
    case(
        column(SEQ, "user", pl.col("user").cast(pl.String)),
        SEQ,
        "column 'user' of type String",
        id="user-string",
    ),
    case(
        column(SEQ, "category", pl.col("category").list.first()),
        SEQ,
        "column 'category' of type",
        id="category-not-a-list",
    ),
    # -- sequences.parquet rows
    case(column(SEQ, "user", pl.col("user") + 1), SEQ, "not exactly 0..U-1", id="users-shifted"),
    case(
        column(SEQ, "user", pl.col("user").shift(1, fill_value=0)),
        SEQ,
        "not exactly 0..U-1",
        id="user-duplicated",
    ),
    case(
        table(SEQ, lambda f: f.reverse()), SEQ, "not exactly 0..U-1 in order", id="users-unsorted"
    ),
    case(
        table(SEQ, lambda f: f.head(-1)),
        SEQ,
        "users, while meta.json says",
        id="sequence-row-dropped",
    ),
    case(
        table(SEQ, lambda f: pl.concat([f, f.tail(1)])),
        SEQ,
        "users, while meta.json says",
        id="sequence-row-added",
    ),
    case(
        column(SEQ, "items", at_user(5, items_col.list.concat(pl.lit([0])), "items")),
        SEQ,
        "PAD (0) inside",
        "row 5",
        id="pad-inside",
    ),
    case(
        column(SEQ, "items", at_user(4, items_col.list.concat(pl.lit([-2])), "items")),
        SEQ,
        "outside 1..",
        id="item-negative",
    ),
    case(
        column(SEQ, "items", at_user(3, items_col.list.concat(pl.lit([10**12])), "items")),
        SEQ,
        "outside 1..",
        "1000000000000",
        id="item-huge",
    ),
    case(
        column(SEQ, "items", items_col.list.eval(pl.element() + 1)),
        SEQ,
        "item index outside 1..",
        id="items-off-by-one",
    ),
    case(
        column(
            SEQ,
            "items",
            at_user(2, items_col.list.concat(pl.lit([None], dtype=pl.List(pl.Int64))), "items"),
        ),
        SEQ,
        "missing (null) item",
        "row 2",
        id="item-null",
    ),
    case(
        column(SEQ, "items", at_user(6, pl.lit(None, dtype=pl.List(pl.Int64)), "items")),
        SEQ,
        "empty or missing 'items'",
        id="items-list-null",
    ),
    case(
        column(SEQ, "items", at_user(6, pl.lit([], dtype=pl.List(pl.Int64)), "items")),
        SEQ,
        "empty or missing 'items'",
        id="items-list-empty",
    ),
    case(
        column(SEQ, "val_index", pl.col("val_index") + 100),
        SEQ,
        "'val_index' outside",
        id="val-past-end",
    ),
    case(
        column(SEQ, "val_index", pl.col("val_index") * 0), SEQ, "'val_index' outside", id="val-zero"
    ),
    case(
        column(SEQ, "val_index", -pl.col("val_index")),
        SEQ,
        "'val_index' outside",
        id="val-negative",
    ),
    case(column(SEQ, "val_index", length), SEQ, "'val_index' outside", id="val-equals-length"),
    case(
        column(SEQ, "test_index", pl.col("test_index") - 1),
        SEQ,
        "'test_index' other than the last",
        id="test-not-last",
    ),
    case(
        column(SEQ, "test_index", length),
        SEQ,
        "'test_index' other than the last",
        id="test-past-end",
    ),
    case(
        column(SEQ, "test_index", pl.col("test_index") * 0),
        SEQ,
        "'test_index' other than the last",
        id="test-zero",
    ),
    case(
        column(SEQ, "val_index", pl.col("test_index")),
        SEQ,
        "at or after its 'test_index'",
        "leak",
        id="val-equals-test",
    ),
    case(
        column(SEQ, "category", pl.col("category").list.slice(1)),
        SEQ,
        "list in column 'category' whose length differs",
        id="category-shorter",
    ),
    case(
        column(SEQ, "event", pl.col("event").list.concat(pl.lit([1]))),
        SEQ,
        "list in column 'event' whose length differs",
        id="event-longer",
    ),
    case(
        column(SEQ, "category", at_user(7, pl.lit(None, dtype=pl.List(pl.Int64)), "category")),
        SEQ,
        "list in column 'category' whose length differs",
        id="category-list-null",
    ),
    case(
        column(SEQ, "event", pl.col("event").list.eval(pl.element() + 100)),
        SEQ,
        "code in column 'event' outside 0..",
        id="event-code-too-big",
    ),
    case(
        column(SEQ, "category", pl.col("category").list.eval(pl.element() - 5)),
        SEQ,
        "code in column 'category' outside 0..",
        id="category-code-negative",
    ),
    case(
        column(SEQ, "event", at_user(8, pl.col("event").list.eval(pl.element().shift(1)), "event")),
        SEQ,
        "missing (null) code in column 'event'",
        id="event-code-null",
    ),
]


@pytest.mark.parametrize("corrupt, file, fragments", CASES)
def test_a_broken_folder_is_refused_with_one_clear_message(copy, corrupt, file, fragments):
    assert_refused_on_load(copy, corrupt, file, fragments)
