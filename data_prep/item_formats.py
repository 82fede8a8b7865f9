"""Item table formats: the layout of an item table (``items=<file>``) and what each of its
columns is.

An *item format* is a small mapping, one ``conf/items_format/<name>.yaml`` each, in the shape of
the log's formats (:mod:`data_prep.formats`): those yaml files are the registry
(``items_format=<name>`` on the command line, the name or a mapping in Python; the built-in
MovieLens ones exist only there, and the generic ``csv``, ``parquet`` and ``jsonl`` complete a
mapping that names only what differs from them), ``reader`` names a reader of the fixed table
:data:`data_prep.item_readers.ITEM_READERS`, and the rest are that reader's options
(``separator``, ``has_header``, ``names``, ``quote_char``, ``encoding``) and the column
mapping::

    id: movie_id              the item id column (the id policy of data_prep/ids.py)
    categorical: [brand]      one value per item                       -> a code
    multi: [genres]           values split on multi_separator ("|")    -> a list of codes
    numeric: [price]          numbers                                  -> a quantile-bucket code
    flags: {genres: [Action, Comedy, ...]}   0/1 columns -> one multi column of their names
    null_values: [NA]         texts that mean missing (a whole field)

Each attribute becomes an ``items.parquet`` column of its name (a table column's name, or a
``flags`` key), so the names must differ from each other, from the id column and from the
columns items.parquet has already (:data:`data_prep.schema.ITEM_COLUMNS`). The mapping is
checked here, before any file is read.
"""

from __future__ import annotations

import codecs
from collections import Counter
from collections.abc import Mapping
from typing import Any

from data_prep import schema
from data_prep.formats import load_format
from data_prep.item_readers import ITEM_READERS
from data_prep.prep_error import PrepError
from recsys_seq.core.conf import CONF_DIR
from recsys_seq.core.option_checks import option_list

ITEM_FORMAT_DIR = CONF_DIR / "items_format"
OPTION = "items_format"
LISTS = ("categorical", "multi", "numeric", "null_values")  # the keys that list names


def load_item_format(fmt: str | Mapping[str, Any]) -> dict[str, Any]:
    """The item format ``fmt`` (a name of ``conf/items_format`` or a mapping), its column
    lists as lists of names (one name given alone is that name) and checked.

    Raises:
        PrepError / OptionError: an unknown name or reader, a key of the wrong type, an
            attribute named twice, after the id column or after a column of items.parquet.
    """
    fmt = load_format(fmt, ITEM_FORMAT_DIR, OPTION)
    reader = fmt.get("reader", "csv")
    if reader not in ITEM_READERS:
        raise PrepError(
            f"{OPTION} {fmt.get('name')!r} names reader {reader!r}; item table readers: "
            f"{', '.join(ITEM_READERS)}."
        )
    # a mapping given in Python may name only what differs from its reader's generic format
    fmt = {**load_format(reader, ITEM_FORMAT_DIR, OPTION), **fmt}
    for key, what in (("id", "a column name"), ("multi_separator", "a separator")):
        if not isinstance(fmt.get(key), str) or not fmt[key]:
            raise PrepError(f"{OPTION}.{key} must be {what}, got {fmt.get(key)!r}.")
    for key in LISTS:
        fmt[key] = option_list(f"{OPTION}.{key}", fmt.get(key)) or []
    flags = fmt.get("flags") or {}
    if not isinstance(flags, Mapping):
        raise PrepError(
            f"{OPTION}.flags must map a name to the 0/1 columns it gathers, got {flags!r}."
        )
    fmt["flags"] = {
        str(name): option_list(f"{OPTION}.flags.{name}", columns, allow_empty=False)
        for name, columns in flags.items()
    }
    _check_encoding(fmt)
    _check_names(fmt)
    return fmt


def attributes(fmt: Mapping[str, Any]) -> dict[str, str]:
    """Attribute name -> kind (:data:`data_prep.schema.ATTRIBUTE_KINDS`), in items.parquet's
    order: categorical, multi, flags (multi), numeric."""
    kinds = {name: schema.CATEGORICAL for name in fmt["categorical"]}
    kinds |= {name: schema.MULTI for name in (*fmt["multi"], *fmt["flags"])}
    return kinds | {name: schema.NUMERIC_BUCKETED for name in fmt["numeric"]}


def source_columns(fmt: Mapping[str, Any]) -> list[str]:
    """The table's columns the format reads: the id, the attributes, the flags' columns."""
    flagged = [column for columns in fmt["flags"].values() for column in columns]
    named = [fmt["id"], *fmt["categorical"], *fmt["multi"], *flagged, *fmt["numeric"]]
    return list(dict.fromkeys(named))


def _check_encoding(fmt: Mapping[str, Any]) -> None:
    encoding = fmt.get("encoding", "utf-8")
    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise PrepError(
            f"{OPTION}.encoding={encoding!r} is not a text encoding Python knows (e.g. utf-8, "
            "latin-1, cp1252)."
        ) from None


def _check_names(fmt: Mapping[str, Any]) -> None:
    names = [*fmt["categorical"], *fmt["multi"], *fmt["flags"], *fmt["numeric"]]
    twice = [name for name, n in Counter(names).items() if n > 1]
    if twice:
        raise PrepError(
            f"{OPTION} names the attribute {twice[0]!r} twice (among categorical, multi, "
            "flags and numeric); give each column one kind."
        )
    if fmt["id"] in names:
        raise PrepError(
            f"{OPTION}.id={fmt['id']!r} is also listed as an attribute; the id column joins "
            "the table to the log, it is not an attribute."
        )
    flagged = [column for columns in fmt["flags"].values() for column in columns]
    own = [name for name in [fmt["id"], *names, *flagged] if name.startswith("_")]
    if own:
        raise PrepError(
            f"{OPTION} names the column {own[0]!r}: names that start with '_' are the prep "
            "job's own working columns; rename that column of the item table."
        )
    taken = [name for name in names if name in schema.ITEM_COLUMNS]
    if taken:
        raise PrepError(
            f"{OPTION} names an attribute {taken[0]!r}, a column items.parquet has already "
            f"({', '.join(schema.ITEM_COLUMNS)}); rename that column of the item table."
        )
