"""PreparedSequences.load refuses a damaged or hostile prepared folder with one clear error:
the folder itself, its meta.json, and each file as a file.

A tiny dataset is prepared once with the real prep job (the ``prepared`` fixture,
tests/conftest.py); each test corrupts a copy of it in one way and checks the error: a
:class:`PreparedDataError` (a user error, so exit status 2 on the command line), one paragraph
naming the broken file and the problem and saying to prepare the data again. Here: a missing or
odd folder, meta.json that is no JSON object or holds wrong entries or disagrees with the
tables, parquet files that are missing, cut short, not parquet, not regular files, scrambled or
unreadable, a bad histogram, and the command line's refusal. Harmless variants (narrower
integer types, extra columns, other row groups) and the untouched folder still load exactly
what the files hold. (What the tables hold: tests/test_prepared_tables.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from data_prep import schema
from recsys_seq.data import PreparedSequences
from recsys_seq.data.checking import PreparedDataError
from tests.helpers import (
    FEATURES,
    ITEMS,
    META,
    PNG,
    SEQ,
    USERS,
    assert_refused_on_load,
    case,
    column,
    items_col,
    meta_edit,
    read,
    table,
)

# ---------------------------------------------------------------------------- corruptions


def meta_set(key: str, value: object):
    return meta_edit(lambda m: m.__setitem__(key, value))


def meta_drop(key: str):
    return meta_edit(lambda m: m.pop(key))


def write(name: str, data: bytes):
    def corrupt(folder: Path) -> None:
        (folder / name).write_bytes(data)

    return corrupt


def truncate(name: str, keep: float = 0.5):
    def corrupt(folder: Path) -> None:
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: int(len(data) * keep)])

    return corrupt


def scramble_column(name: str, col: str):
    """Overwrite the middle half of one column's pages (the footer stays intact)."""

    def corrupt(folder: Path) -> None:
        meta = pq.ParquetFile(folder / name).metadata.row_group(0)
        chunk = next(
            meta.column(i)
            for i in range(meta.num_columns)
            if meta.column(i).path_in_schema.split(".")[0] == col
        )
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        size = chunk.total_compressed_size
        data = bytearray((folder / name).read_bytes())
        data[start + size // 4 : start + 3 * size // 4] = np.random.default_rng(0).bytes(
            3 * size // 4 - size // 4
        )
        (folder / name).write_bytes(bytes(data))

    return corrupt


def remove(name: str):
    def corrupt(folder: Path) -> None:
        (folder / name).unlink()

    return corrupt


def replace_with_folder(name: str):
    def corrupt(folder: Path) -> None:
        (folder / name).unlink()
        (folder / name).mkdir()

    return corrupt


def replace_with_fifo(name: str):
    """A named pipe: opening it would block forever; it must be refused without reading."""

    def corrupt(folder: Path) -> None:
        (folder / name).unlink()
        os.mkfifo(folder / name)

    return corrupt


def symlink_to(name: str, target: str):
    def corrupt(folder: Path) -> None:
        (folder / name).unlink()
        (folder / name).symlink_to(target)

    return corrupt


CASES = [
    # -- the folder itself
    case(lambda f: shutil.rmtree(f), None, "does not exist", id="folder-missing"),
    case(lambda f: (shutil.rmtree(f), f.write_text("x")), None, "is a file", id="folder-is-file"),
    case(remove(META), None, "not a prepared dataset", "no meta.json", id="no-meta"),
    case(replace_with_folder(META), None, "no meta.json", id="meta-is-folder"),
    case(replace_with_fifo(META), None, "no meta.json", id="meta-is-fifo"),
    # -- meta.json content
    case(write(META, b"{not json"), META, "not valid JSON", id="meta-garbage"),
    case(truncate(META), META, "not valid JSON", id="meta-truncated"),
    case(write(META, b""), META, "not valid JSON", id="meta-empty"),
    case(write(META, b"\xff\xfe\x00binary"), META, "not valid JSON", id="meta-not-utf8"),
    case(write(META, b"[" * 100_000), META, "not valid JSON", id="meta-absurdly-nested"),
    case(write(META, b"[1, 2]"), META, "an array, not a JSON object", id="meta-array"),
    case(write(META, b'"meta"'), META, "a string, not a JSON object", id="meta-string"),
    case(write(META, b"null"), META, "null, not a JSON object", id="meta-null"),
    case(meta_drop("schema_version"), META, "no schema_version", id="version-missing"),
    case(meta_set("schema_version", 2), META, "2 as its schema_version", "reads", id="version-2"),
    case(meta_set("schema_version", "1"), META, "schema_version", id="version-string"),
    case(meta_set("schema_version", True), META, "schema_version", id="version-bool"),
    case(meta_set("schema_version", 1.0), META, "schema_version", id="version-float"),
    case(meta_drop("users"), META, "no 'users' entry", id="users-missing"),
    case(meta_drop("events"), META, "no 'events' entry", id="events-missing"),
    case(meta_set("items", "12"), META, "'items' = \"12\" (a string)", id="items-string"),
    case(meta_set("items", None), META, "'items' = null", id="items-null"),
    case(meta_set("items", 0), META, "'items' = 0", ">= 1", id="items-zero"),
    case(meta_set("users", True), META, "'users' = true", id="users-bool"),
    case(meta_set("users", -3), META, "'users' = -3", id="users-negative"),
    case(meta_set("events", 7.5), META, "'events' = 7.5 (a number)", id="events-float"),
    case(write(META, b'{"schema_version": 1, "users": NaN}'), META, "'users'", id="users-nan"),
    case(meta_drop("item_fingerprint"), META, "no 'item_fingerprint'", id="fingerprint-missing"),
    case(meta_set("item_fingerprint", 5), META, "'item_fingerprint' = 5", id="fingerprint-int"),
    case(meta_drop("side_features"), META, "no 'side_features'", id="side-features-missing"),
    case(meta_set("side_features", ["category"]), META, "an array", id="side-features-list"),
    case(
        meta_set("side_features", {"colour": 3}),
        META,
        "unknown side feature 'colour'",
        id="side-feature-unknown",
    ),
    case(
        meta_edit(lambda m: m["side_features"].__setitem__("category", "4")),
        META,
        'side_features.category = "4"',
        id="side-feature-size-string",
    ),
    case(
        meta_edit(lambda m: m["side_features"].__setitem__("event", 0)),
        META,
        "side_features.event = 0",
        id="side-feature-size-zero",
    ),
    # -- meta.json disagreeing with the tables
    case(
        meta_edit(lambda m: m.__setitem__("items", m["items"] + 1)),
        ITEMS,
        "items, while meta.json says",
        id="items-count",
    ),
    case(
        meta_edit(lambda m: m.__setitem__("users", m["users"] - 1)),
        USERS,
        "users, while meta.json says",
        id="users-count",
    ),
    case(
        meta_edit(lambda m: m.__setitem__("events", m["events"] + 1)),
        SEQ,
        "events, while meta.json says",
        id="events-count",
    ),
    case(
        meta_set("item_fingerprint", "0" * 64), ITEMS, "item_fingerprint", id="fingerprint-mismatch"
    ),
    case(
        meta_edit(lambda m: m["side_features"].__setitem__("gap", 34)),
        SEQ,
        "no column 'gap'",
        id="meta-feature-without-column",
    ),
    case(
        meta_edit(lambda m: m["side_features"].__setitem__("category", 2)),
        SEQ,
        "code in column 'category' outside 0..1",
        id="category-vocabulary-too-small",
    ),
    # -- any parquet file: missing, cut short, not parquet, not a file
    *(
        case(corrupt(name), name, fragment, id=f"{label}-{name.split('.')[0]}")
        for name in (SEQ, ITEMS, USERS)
        for corrupt, fragment, label in (
            (remove, "is missing", "missing"),
            (truncate, "not a readable parquet file", "truncated"),
            (lambda n: truncate(n, 0.98), "not a readable parquet file", "footer-cut"),
            (lambda n: write(n, b""), "not a readable parquet file", "empty"),
            (lambda n: write(n, b"user,items\n0,1\n"), "not a readable parquet file", "csv"),
            (lambda n: write(n, b"PAR1" + b"\0" * 64 + b"PAR1"), "not a readable", "fake-magic"),
            (replace_with_folder, "not a regular file", "folder"),
            (replace_with_fifo, "not a regular file", "fifo"),
            (lambda n: symlink_to(n, "/dev/zero"), "not a regular file", "device"),
        )
    ),
    *(
        case(scramble_column(name, col), name, "is damaged", id=f"scrambled-{name[:5]}-{col}")
        for name, col in (
            (SEQ, schema.ITEMS),
            (SEQ, schema.VAL_INDEX),
            (SEQ, "category"),
            (ITEMS, schema.ORIGINAL_ID),
            (USERS, schema.USER),
        )
    ),
    # -- length_histogram.png
    case(remove(PNG), PNG, "is missing", id="histogram-missing"),
    case(write(PNG, b"GIF89a not a png"), PNG, "not a PNG", id="histogram-not-png"),
    case(write(PNG, b""), PNG, "not a PNG", id="histogram-empty"),
    case(replace_with_fifo(PNG), PNG, "not a regular file", id="histogram-fifo"),
]


@pytest.mark.parametrize("corrupt, file, fragments", CASES)
def test_a_broken_folder_is_refused_with_one_clear_message(copy, corrupt, file, fragments):
    assert_refused_on_load(copy, corrupt, file, fragments)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
@pytest.mark.parametrize("name", [META, SEQ, ITEMS, USERS, PNG])
def test_an_unreadable_file_is_refused(copy, name):
    (copy / name).chmod(0)
    with pytest.raises(PreparedDataError, match="ermission"):
        PreparedSequences.load(copy)


@pytest.mark.slow  # starts the training command
def test_the_command_line_refuses_a_broken_folder_without_a_traceback(copy, tmp_path):
    column(SEQ, "val_index", pl.col("val_index") + 100)(copy)
    result = subprocess.run(
        [Path(sys.executable).parent / "recsys-train", f"data.path={copy}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"recsys-train: error: {copy / SEQ} has a 'val_index' outside" in result.stderr


# ---------------------------------------------------------------------------- valid folders


def expected_arrays(folder: Path) -> dict[str, np.ndarray]:
    """What load must return, read straight from the files."""
    frame = read(folder, SEQ).sort(schema.USER)
    lengths = frame[schema.ITEMS].list.len().to_numpy()
    return {
        "items": np.concatenate(frame[schema.ITEMS].to_list()),
        "offsets": np.concatenate([[0], np.cumsum(lengths)]),
        "users": frame[schema.USER].to_numpy(),
        "val_index": frame[schema.VAL_INDEX].fill_null(-1).to_numpy(),
        "test_index": frame[schema.TEST_INDEX].fill_null(-1).to_numpy(),
        **{name: np.concatenate(frame[name].to_list()) for name in FEATURES},
    }


def assert_loads(folder: Path, expected: dict[str, np.ndarray], meta: dict) -> None:
    data = PreparedSequences.load(folder)
    assert sorted(data.features) == FEATURES
    got = {k: getattr(data, k) for k in ("items", "offsets", "users", "val_index", "test_index")}
    for name, values in {**got, **data.features}.items():
        assert values.dtype == np.int64, name
        np.testing.assert_array_equal(values, expected[name], err_msg=name)
    assert data.meta == meta


def test_the_valid_folder_loads_what_its_files_hold(prepared):
    meta = json.loads((prepared / META).read_text())
    expected = expected_arrays(prepared)
    assert (expected["val_index"] == -1).any() and (expected["val_index"] > 0).any()
    assert_loads(prepared, expected, meta)


HARMLESS = [
    pytest.param(column(SEQ, "items", items_col.cast(pl.List(pl.Int32))), id="narrower-item-lists"),
    pytest.param(
        table(SEQ, lambda f: f.cast({"user": pl.UInt16, "val_index": pl.Int32})),
        id="narrower-integers",
    ),
    pytest.param(table(SEQ, lambda f: f.select(list(reversed(f.columns)))), id="columns-reordered"),
    pytest.param(table(SEQ, lambda f: f.with_columns(note=pl.lit("x"))), id="extra-column"),
    pytest.param(
        lambda folder: read(folder, SEQ).write_parquet(folder / SEQ, row_group_size=3),
        id="small-row-groups",
    ),
    pytest.param(
        lambda folder: read(folder, SEQ).write_parquet(folder / SEQ, compression="uncompressed"),
        id="uncompressed",
    ),
]


@pytest.mark.parametrize("change", HARMLESS)
def test_harmless_variants_load_identically(prepared, copy, change):
    meta = json.loads((prepared / META).read_text())
    expected = expected_arrays(prepared)
    change(copy)
    assert_loads(copy, expected, meta)


def test_unknown_codes_in_side_features_are_allowed(copy):
    """Side-feature code 0 means unknown (a null category in the log): valid data."""
    column(SEQ, "category", pl.col("category").list.eval(pl.element() * 0))(copy)
    data = PreparedSequences.load(copy)
    assert (data.features["category"] == 0).all()
