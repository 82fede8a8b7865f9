"""Damaged copies of a prepared folder."""

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from data_prep import schema
from recsys_seq.core.errors import UserError
from recsys_seq.data import PreparedSequences
from recsys_seq.data.checking import PreparedDataError

# (tests/test_prepared_files.py, tests/test_prepared_tables.py, tests/test_prep_items_load.py; the
# folder itself is the ``prepared`` fixture, tests/conftest.py)

SEQ, ITEMS, USERS, META, PNG = (
    schema.SEQUENCES_FILE,
    schema.ITEMS_FILE,
    schema.USERS_FILE,
    schema.META_FILE,
    schema.HISTOGRAM_FILE,
)
FEATURES = ["category", "event"]


def read(folder: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(folder / name)


def table(name: str, change: Callable[[pl.DataFrame], pl.DataFrame]):
    """Rewrite ``name`` with ``change`` applied."""

    def corrupt(folder: Path) -> None:
        change(read(folder, name)).write_parquet(folder / name)

    return corrupt


def meta_edit(change: Callable[[dict], object]):
    """Rewrite meta.json after ``change`` edited it in place."""

    def corrupt(folder: Path) -> None:
        meta = json.loads((folder / META).read_text())
        change(meta)
        (folder / META).write_text(json.dumps(meta))

    return corrupt


def column(name: str, col: str, expr: pl.Expr):
    return table(name, lambda f: f.with_columns(expr.alias(col)))


items_col = pl.col(schema.ITEMS)


def case(corrupt, file: str | None, *fragments: str, id: str):
    """A corruption, the file its message must name (None: the folder) and what it must say."""
    return pytest.param(corrupt, file, fragments, id=id)


def assert_refused_on_load(copy: Path, corrupt, file: str | None, fragments) -> None:
    """``corrupt`` the copy of a prepared folder: loading it is one paragraph naming the broken
    file (or the folder) and every fragment, and pointing at recsys-prep."""
    corrupt(copy)
    with pytest.raises(PreparedDataError) as info:
        PreparedSequences.load(copy)
    message = str(info.value)
    assert isinstance(info.value, UserError)
    assert "\n" not in message  # one paragraph
    assert str(copy / file if file else copy) in message
    for fragment in fragments:
        assert fragment in message, message
    assert "recsys-prep" in message
