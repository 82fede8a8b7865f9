"""Prep with an item table on a six-event log, and items.parquet read back by original id.

(tests/test_prep_items_*.py)"""

from pathlib import Path

import polars as pl

from data_prep import schema
from tests.helpers.prepared import ITEMS

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
