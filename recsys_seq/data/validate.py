"""Refuse a prepared dataset folder that is not what recsys-prep writes, before any work.

A prepared folder may come from a stranger, or be damaged (a copy cut short, a hand edit, a
file from another version). Read unchecked, it fails deep inside training with a traceback or,
worse, trains on wrong data: an item index past the embedding table, PAD inside a history, a
validation index at or after the test target (the test target leaks into training). So every
file of the contract (:mod:`data_prep.schema`) has one check here, and each refuses with a
:class:`PreparedDataError` naming the file, the column, what is wrong and what to do.

This module says what each file must hold; :mod:`recsys_seq.data.checking` is how it is
checked: whole-column aggregates, all of a table's in one Polars pass; the first offending row
is looked up only when a check fails, for the message. What loading does not read
(``timestamps``) is checked for presence and type from the parquet footer only: its content
cannot change anything loaded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

import polars as pl

from data_prep import schema
from data_prep.prep import item_fingerprint
from recsys_seq.data.checking import (
    INTEGER,
    INTEGER_LIST,
    MAKE_ONE,
    PLAIN,
    PreparedDataError,
    check_rules,
    each_element,
    each_row,
    read_parquet,
    refuse,
    shown,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_prepared(path: Path) -> tuple[dict[str, Any], pl.DataFrame]:
    """Check every file of the prepared dataset folder ``path``.

    Returns:
        meta.json, and sequences.parquet's ``user``, ``items``, ``val_index``, ``test_index``
        and side-feature columns (those meta.json lists), integers cast to Int64.
    Raises:
        PreparedDataError: the first problem found, naming the file.
    """
    if not path.exists():
        raise PreparedDataError(
            f"Prepared dataset folder {path} does not exist; make one with "
            f"`{MAKE_ONE.format(folder=path)}`."
        )
    if not path.is_dir():
        raise PreparedDataError(
            f"{path} is a file, not a prepared dataset folder; give the folder recsys-prep "
            f"wrote (make one with `{MAKE_ONE.format(folder='<folder>')}`)."
        )
    if not (path / schema.META_FILE).is_file():
        raise PreparedDataError(
            f"{path} is not a prepared dataset: it has no {schema.META_FILE}. Make one in a new "
            f"folder with `{MAKE_ONE.format(folder='<new folder>')}` and pass that folder."
        )
    meta = check_meta(path / schema.META_FILE)
    check_items(path / schema.ITEMS_FILE, meta)
    check_users(path / schema.USERS_FILE, meta)
    sequences = check_sequences(path / schema.SEQUENCES_FILE, meta)
    check_histogram(path / schema.HISTOGRAM_FILE)
    return meta, sequences


# ---------------------------------------------------------------------------- meta.json


def check_meta(file: Path) -> dict[str, Any]:
    """meta.json: a JSON object of this schema version whose counts, item fingerprint and
    side-feature sizes (what the rest of the checks and the models read) have their types."""
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except OSError as error:
        refuse(file, f"cannot be read ({error.strerror or error})")
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON, absurdly nested
        refuse(file, f"is not valid JSON ({error})")
    if not isinstance(meta, dict):
        refuse(file, f"holds {_json_kind(meta)}, not a JSON object")
    version = meta.get(schema.META_SCHEMA_VERSION)
    if type(version) is not int or version != schema.SCHEMA_VERSION:
        found = "no" if version is None else f"{shown(version)} as its"
        refuse(
            file,
            f"has {found} {schema.META_SCHEMA_VERSION}; this version of recsys-seq reads "
            f"schema version {schema.SCHEMA_VERSION}",
        )
    for key in ("users", "items", "events"):
        _require(file, meta, key, _is_count, "a whole number >= 1")
    _require(file, meta, schema.META_ITEM_FINGERPRINT, lambda v: isinstance(v, str), "a string")
    sizes = _require(
        file, meta, schema.META_SIDE_FEATURES, lambda v: isinstance(v, dict), "an object"
    )
    for name, size in sizes.items():
        if name not in schema.SIDE_FEATURES:
            refuse(
                file,
                f"lists an unknown side feature {name!r} in {schema.META_SIDE_FEATURES} "
                f"(known: {', '.join(schema.SIDE_FEATURES)})",
            )
        if not _is_count(size):
            refuse(
                file,
                f"has {schema.META_SIDE_FEATURES}.{name} = {shown(size)} ({_json_kind(size)}); "
                "expected a vocabulary size, a whole number >= 1",
            )
    if schema.META_ITEM_ATTRIBUTES in meta:
        _check_item_attributes(file, meta)
    return meta


def _check_item_attributes(file: Path, meta: dict) -> None:
    """``item_attributes`` (an item table's columns, see :mod:`data_prep.item_attributes`):
    per attribute a known kind, a vocabulary of ``size`` strings starting with PAD, and for
    a numeric-bucketed one ``size - 2`` increasing finite edges."""
    key = schema.META_ITEM_ATTRIBUTES
    attributes = _require(file, meta, key, lambda v: isinstance(v, dict), "an object")
    for name, entry in attributes.items():
        where = f"{key}.{name}"
        if name in schema.ITEM_COLUMNS:
            refuse(file, f"names an item attribute {name!r}, a column items.parquet has already")
        if not isinstance(entry, dict):
            refuse(file, f"has {where} = {shown(entry)} ({_json_kind(entry)}); expected an object")
        if entry.get("kind") not in schema.ATTRIBUTE_KINDS:
            refuse(
                file,
                f"has {where}.kind = {shown(entry.get('kind'))}; expected one of "
                f"{', '.join(schema.ATTRIBUTE_KINDS)}",
            )
        size, vocab = entry.get("size"), entry.get("vocab")
        if not _is_count(size):
            refuse(file, f"has {where}.size = {shown(size)}; expected a whole number >= 1")
        if (
            not isinstance(vocab, list)
            or len(vocab) != size
            or not all(isinstance(v, str) for v in vocab)
            or vocab[0] != schema.PAD_TOKEN
        ):
            refuse(
                file,
                f"has {where}.vocab = {shown(vocab)}; expected {size} strings, the first "
                f"{schema.PAD_TOKEN!r}",
            )
        if entry["kind"] == schema.NUMERIC_BUCKETED and not _are_edges(entry.get("edges"), size):
            refuse(
                file,
                f"has {where}.edges = {shown(entry.get('edges'))}; expected {size - 2} "
                "increasing finite numbers",
            )


def _are_edges(edges: Any, size: int) -> bool:
    numbers = isinstance(edges, list) and all(
        type(e) in (int, float) and math.isfinite(e) for e in edges
    )
    return numbers and len(edges) == size - 2 and all(a < b for a, b in pairwise(edges))


def _require(file: Path, meta: dict, key: str, ok: Callable[[Any], bool], expected: str) -> Any:
    if key not in meta:
        refuse(file, f"has no {key!r} entry")
    value = meta[key]
    if not ok(value):
        refuse(file, f"has {key!r} = {shown(value)} ({_json_kind(value)}); expected {expected}")
    return value


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 1  # not bool, not float: counts are exact


def _json_kind(value: Any) -> str:
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "true/false"}
    return "null" if value is None else kinds.get(type(value), "a number")


# ---------------------------------------------------------------------------- parquet tables


def check_items(file: Path, meta: Mapping[str, Any]) -> None:
    """items.parquet: one row per item index, exactly 1..N in order (N = meta.json ``items``;
    item 0, PAD, has no row: loading gives it the PAD code 0 of every attribute), distinct
    original ids whose fingerprint is meta.json's ``item_fingerprint``, and the item
    attributes meta.json lists as codes inside their vocabularies."""
    attributes = meta.get(schema.META_ITEM_ATTRIBUTES, {})
    frame = read_parquet(
        file,
        {
            schema.ITEM: INTEGER,
            schema.ORIGINAL_ID: PLAIN,
            schema.COUNT: INTEGER,
            **{
                name: INTEGER_LIST if entry["kind"] == schema.MULTI else INTEGER
                for name, entry in attributes.items()
            },
        },
    )
    _same_count(file, frame.height, "items", meta)
    check_rules(
        file,
        frame,
        [
            *_id_table_rules("item", schema.ITEM, first=1, shown="1..N"),
            each_row(
                f"has a {schema.COUNT!r} that is missing or negative (training occurrences)",
                pl.col(schema.COUNT).fill_null(-1) >= 0,
            ),
            *(rule for name, entry in attributes.items() for rule in _attribute_rules(name, entry)),
        ],
    )
    if item_fingerprint(frame[schema.ORIGINAL_ID]) != meta[schema.META_ITEM_FINGERPRINT]:
        refuse(
            file,
            f"holds original item ids (or an order of them) other than those the "
            f"{schema.META_ITEM_FINGERPRINT} in {schema.META_FILE} was made from",
        )


def _attribute_rules(name: str, entry: Mapping[str, Any]) -> list:
    """An item attribute's codes: 0..size-1 for one code per item (0 = missing), a list of
    codes 1..size-1 (PAD never inside; ``[]`` for none) for a multi attribute."""
    size = entry["size"]
    vocabulary = f"the vocabulary of {schema.META_ITEM_ATTRIBUTES}.{name} in {schema.META_FILE}"
    if entry["kind"] != schema.MULTI:
        return [
            each_row(
                f"has a missing code or one outside 0..{size - 1} ({vocabulary}) in column "
                f"{name!r}",
                pl.col(name).is_between(0, size - 1),
            )
        ]
    return [
        each_row(f"has a missing list in column {name!r}", pl.col(name).is_not_null()),
        each_element(
            f"has a missing code, PAD or a code outside 1..{size - 1} ({vocabulary}) inside a "
            f"list of column {name!r}",
            name,
            lambda code: code.is_between(1, size - 1),
        ),
    ]


def check_users(file: Path, meta: Mapping[str, Any]) -> None:
    """users.parquet: one row per user index, exactly 0..U-1 in order, distinct original ids."""
    frame = read_parquet(file, {schema.USER: INTEGER, schema.ORIGINAL_ID: PLAIN})
    _same_count(file, frame.height, "users", meta)
    check_rules(file, frame, _id_table_rules("user", schema.USER, first=0, shown="0..U-1"))


def _id_table_rules(noun: str, index: str, first: int, shown: str) -> list:
    """What items.parquet and users.parquet both hold to: the ``index`` column exactly
    ``first``, ``first + 1``, ... in order (``shown``: that range as a refusal names it), and
    one distinct, present original id per row."""
    original = pl.col(schema.ORIGINAL_ID)
    return [
        each_row(
            f"has {noun} indices that are not exactly {shown} in order",
            pl.col(index) == pl.int_range(first, pl.len() + first),
        ),
        each_row(f"has a missing {schema.ORIGINAL_ID!r}", original.is_not_null()),
        each_row(f"lists an {schema.ORIGINAL_ID!r} twice", original.is_unique()),
    ]


def check_sequences(file: Path, meta: Mapping[str, Any]) -> pl.DataFrame:
    """sequences.parquet: one row per user 0..U-1 in order, non-empty item lists of real items
    1..N, split indices inside their list (validation before test, test = the last event), side
    features as long as the item list with codes inside their vocabularies; the counts of
    meta.json. Returns the columns loading reads."""
    features = dict(meta[schema.META_SIDE_FEATURES])
    frame = read_parquet(
        file,
        {
            schema.USER: INTEGER,
            schema.ITEMS: INTEGER_LIST,
            schema.TIMESTAMPS: INTEGER_LIST,
            schema.VAL_INDEX: INTEGER,
            schema.TEST_INDEX: INTEGER,
            **dict.fromkeys(features, INTEGER_LIST),
        },
        footer_only=(schema.TIMESTAMPS,),
    )
    _same_count(file, frame.height, "users", meta)
    n_items = int(meta["items"])
    length = pl.col(schema.ITEMS).list.len().cast(pl.Int64)
    val, test = pl.col(schema.VAL_INDEX), pl.col(schema.TEST_INDEX)
    rules = [
        each_row(
            f"has {schema.USER!r} values that are not exactly 0..U-1 in order (one row per user)",
            pl.col(schema.USER) == pl.int_range(pl.len()),
        ),
        each_row(f"has an empty or missing {schema.ITEMS!r} list", length >= 1),
        each_element(
            f"has a missing (null) item inside an {schema.ITEMS!r} list",
            schema.ITEMS,
            lambda item: item.is_not_null(),
        ),
        each_element(
            f"has PAD ({schema.PAD}) inside an {schema.ITEMS!r} list",
            schema.ITEMS,
            lambda item: item != schema.PAD,
        ),
        each_element(
            f"has an item index outside 1..{n_items} ({schema.META_FILE} counts {n_items} "
            f"items) in an {schema.ITEMS!r} list",
            schema.ITEMS,
            lambda item: item.is_between(1, n_items),
        ),
        each_row(
            f"has a {schema.VAL_INDEX!r} outside 1..len({schema.ITEMS})-1",
            val.is_null() | ((val >= 1) & (val < length)),
        ),
        each_row(
            f"has a {schema.TEST_INDEX!r} other than the last position of its list, "
            f"len({schema.ITEMS})-1 (at least 1)",
            test.is_null() | ((test >= 1) & (test == length - 1)),
        ),
        each_row(
            f"has a {schema.VAL_INDEX!r} at or after its {schema.TEST_INDEX!r} (the test target "
            "would leak into training)",
            val.is_null() | test.is_null() | (val < test),
        ),
    ]
    for name, size in features.items():
        rules += [
            each_row(
                f"has a list in column {name!r} whose length differs from its {schema.ITEMS!r} "
                "list",
                pl.col(name).list.len() == length,
            ),
            each_element(
                f"has a missing (null) code in column {name!r}",
                name,
                lambda code: code.is_not_null(),
            ),
            each_element(
                f"has a code in column {name!r} outside 0..{size - 1}, the vocabulary of "
                f"{schema.META_SIDE_FEATURES}.{name} = {size} in {schema.META_FILE}",
                name,
                lambda code, size=size: code.is_between(0, size - 1),
            ),
        ]
    check_rules(file, frame, rules)
    events = int(frame[schema.ITEMS].list.len().sum())
    if events != meta["events"]:
        refuse(file, f"holds {events} events, while {schema.META_FILE} says {meta['events']}")
    return frame


def check_histogram(file: Path) -> None:
    """length_histogram.png: present and a PNG (recsys-report copies it next to its plots)."""
    if not file.is_file():
        refuse(file, "is missing (or not a regular file)")
    try:
        with open(file, "rb") as handle:
            head = handle.read(len(PNG_SIGNATURE))
    except OSError as error:
        refuse(file, f"cannot be read ({error.strerror or error})")
    if head != PNG_SIGNATURE:
        refuse(file, "is not a PNG image")


def _same_count(file: Path, rows: int, key: str, meta: Mapping[str, Any]) -> None:
    if rows != meta[key]:
        refuse(file, f"holds {rows} {key}, while {schema.META_FILE} says {meta[key]}")
