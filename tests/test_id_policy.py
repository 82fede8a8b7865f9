"""The id policy of data_prep/ids.py: one item per id and one id per item, in every format.

Each hostile spelling goes through :func:`data_prep.prepare` on a tiny file in tmp_path and is
checked in what a user sees: ``items.parquet`` / ``users.parquet`` (the canonical original
ids) or the one-paragraph PrepError naming the file, column and line (or Parquet row).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_prep import PrepError, prepare, schema
from data_prep.ids import canonical_series, read_id_list

RECSYS_PREP = Path(sys.executable).parent / "recsys-prep"
# Unicode's White_Space property, which Polars strips (Python's str.strip() also strips the
# information separators \x1c-\x1f, which are not whitespace there)
UNICODE_WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
UNICODE_WHITESPACE += "\u2028\u2029\u202f\u205f\u3000"


def csv_log(tmp_path: Path, items: list[str], users: list[str] | None = None) -> Path:
    """A csv log with one event per item spelling (user 1 unless ``users`` given)."""
    users = users or ["1"] * len(items)
    rows = [f"{u},{i},{t}" for t, (u, i) in enumerate(zip(users, items, strict=True))]
    path = tmp_path / "log.csv"
    path.write_text("user_id,item_id,timestamp\n" + "\n".join(rows) + "\n")
    return path


def prepared(tmp_path: Path, src: Path, **cfg) -> tuple[dict, pl.DataFrame, pl.DataFrame]:
    out = tmp_path / "out"
    meta = prepare({"input": src, "output": out, "min_user_events": 1, **cfg})
    return (
        meta,
        pl.read_parquet(out / schema.ITEMS_FILE),
        pl.read_parquet(out / schema.USERS_FILE),
    )


def originals(frame: pl.DataFrame) -> list[str]:
    return sorted(str(v) for v in frame[schema.ORIGINAL_ID].to_list())


# ---------------------------------------------------------------- the rules, on a Series

TEXT_CASES = [
    ("14", "14"),
    (" 14", "14"),
    ("14 ", "14"),
    ("\t14\r", "14"),
    ("014", "14"),
    ("0000014", "14"),
    ("+14", "14"),
    ("14.0", "14"),
    ("14.00", "14"),
    ("14.", "14"),
    ("-007", "-7"),
    ("-0", "0"),
    ("000", "0"),
    ("0.0", "0"),
    ("1000", "1000"),
    ("100.000", "100"),
    ("99999999999999999999999", "99999999999999999999999"),  # beyond int64: still exact
    ("0099999999999999999999999.0", "99999999999999999999999"),
    ("abc", "abc"),
    (" abc ", "abc"),
    ("A b", "A b"),  # inner spaces and case are part of the id
    ("1.5", "1.5"),  # a text id that is not an integer is kept verbatim
    ("14.50", "14.50"),
    ("1e3", "1e3"),
    ("0x10", "0x10"),
    ("1_000", "1_000"),
    (".0", ".0"),
    ("-", "-"),
    ("+", "+"),
    ("٠٠٧", "٠٠٧"),  # other scripts' digits are text
    ("nan", "nan"),  # in a text column, "nan" is a name
    ("", None),
    ("   ", None),
    (None, None),
]


@pytest.mark.parametrize(("raw", "canonical"), TEXT_CASES)
def test_text_ids_canonicalise(raw, canonical):
    assert canonical_series(pl.Series("id", [raw], dtype=pl.String)).to_list() == [canonical]


def test_integer_floats_and_categoricals_canonicalise():
    assert canonical_series(pl.Series([1, -2, None])).to_list() == ["1", "-2", None]
    floats = pl.Series([1000.0, -3.0, 0.0, float("nan"), None])
    assert canonical_series(floats).to_list() == ["1000", "-3", "0", None, None]
    cats = pl.Series([" 07", "a"], dtype=pl.Categorical)
    assert canonical_series(cats).to_list() == ["7", "a"]


@pytest.mark.parametrize("value", [1.5, -0.25, float("inf"), float("-inf"), 2.0**60])
def test_float_series_that_are_not_ids_are_refused(value):
    with pytest.raises(PrepError, match="not integer ids"):
        canonical_series(pl.Series("original_id", [1.0, value]))


@pytest.mark.parametrize(
    "series",
    [pl.Series([True]), pl.Series([date(2024, 1, 1)]), pl.Series([[1]]), pl.Series([b"1"])],
)
def test_series_of_non_id_types_are_refused(series):
    with pytest.raises(PrepError, match="not integers or text"):
        canonical_series(series)


def _spelling(n: int, zeros: int, before: str, after: str, fraction: str, plus: bool) -> str:
    sign = "-" if n < 0 else ("+" if plus else "")
    return f"{before}{sign}{'0' * zeros}{abs(n)}{fraction}{after}"


SPELLING = st.tuples(
    st.integers(min_value=0, max_value=5),
    st.sampled_from(["", " ", "  ", "\t"]),
    st.sampled_from(["", " ", "\t", "\r"]),
    st.sampled_from(["", ".", ".0", ".00", ".000"]),
    st.booleans(),
)


@given(
    n=st.integers(min_value=-(10**30), max_value=10**30),
    spellings=st.lists(SPELLING, min_size=1, max_size=8),
)
def test_property_every_spelling_of_an_integer_is_its_decimal_text(n, spellings):
    raw = [_spelling(n, *s) for s in spellings]
    assert canonical_series(pl.Series(raw)).to_list() == [str(n)] * len(raw)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12))
def test_property_canonical_text_is_idempotent_and_stripped(text):
    once = canonical_series(pl.Series([text]))
    twice = canonical_series(once)
    assert once.to_list() == twice.to_list()
    if once[0] is not None:
        assert once[0] == once[0].strip(UNICODE_WHITESPACE)


# ---------------------------------------------------------------- through prepare


def test_spellings_of_one_id_are_one_item(tmp_path):
    meta, items, users = prepared(
        tmp_path, csv_log(tmp_path, [" 14", "14", "014", "14.0", "+14", "x", " x "])
    )
    assert meta["items"] == 2 and originals(items) == ["14", "x"]
    seqs = pl.read_parquet(tmp_path / "out" / schema.SEQUENCES_FILE)
    assert seqs[schema.ITEMS][0].len() == 7  # every event kept, on one of two items


def test_distinct_ids_stay_distinct(tmp_path):
    """Never one item for two ids: ids that merely look alike are different."""
    spellings = ["1.5", "15", "1e3", "1000", "A", "a", "0x10", "16", "a b", "ab", "-1", "1"]
    meta, items, _ = prepared(tmp_path, csv_log(tmp_path, spellings))
    assert meta["items"] == len(spellings)
    assert originals(items) == sorted(spellings)


def test_user_ids_follow_the_same_policy(tmp_path):
    src = csv_log(tmp_path, ["1", "2", "3", "4"], users=[" 7", "007", "7.0", "u1 "])
    meta, _, users = prepared(tmp_path, src)
    assert meta["users"] == 2 and users[schema.ORIGINAL_ID].to_list() == ["7", "u1"]


def test_integer_columns_keep_their_dtype(tmp_path):
    """The fast path: an all-integer column stays Int64 in items/users.parquet."""
    _, items, users = prepared(tmp_path, csv_log(tmp_path, ["007", "7", "8"], ["01", "1", "1"]))
    assert items[schema.ORIGINAL_ID].dtype == pl.Int64
    assert users[schema.ORIGINAL_ID].dtype == pl.Int64
    assert sorted(items[schema.ORIGINAL_ID].to_list()) == [7, 8]


def test_integral_float_column_becomes_integers(tmp_path):
    """A pandas export with a NaN turned the column into floats: 14.0 is the item 14."""
    _, items, _ = prepared(tmp_path, csv_log(tmp_path, ["14.0", "15.0", "NaN"]), null_ids="drop")
    assert items[schema.ORIGINAL_ID].dtype == pl.Int64
    assert sorted(items[schema.ORIGINAL_ID].to_list()) == [14, 15]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_numbers_and_strings_are_one_id(tmp_path):
    rows = [
        {"user_id": 1, "item_id": 14, "timestamp": 1},
        {"user_id": 1, "item_id": "14", "timestamp": 2},
        {"user_id": 1, "item_id": " 014 ", "timestamp": 3},
        {"user_id": 1, "item_id": "b", "timestamp": 4},
    ]
    meta, items, _ = prepared(tmp_path, write_jsonl(tmp_path / "log.jsonl", rows), format="jsonl")
    assert meta["items"] == 2 and originals(items) == ["14", "b"]


@pytest.mark.parametrize(
    "column",
    [
        pl.Series([14, 14, 15], dtype=pl.Int32),
        pl.Series([14, 14, 15], dtype=pl.UInt64),
        pl.Series([14.0, 14.0, 15.0]),
        pl.Series([14.0, 14.0, 15.0], dtype=pl.Float32),
        pl.Series(["14", " 014", "15"]),
        pl.Series(["14", " 014", "15"], dtype=pl.Categorical),
    ],
    ids=["int32", "uint64", "float64", "float32", "string", "categorical"],
)
def test_parquet_id_types(tmp_path, column):
    src = tmp_path / "log.parquet"
    pl.DataFrame({"user_id": [1, 1, 1], "item_id": column, "timestamp": [1, 2, 3]}).write_parquet(
        src
    )
    meta, items, _ = prepared(tmp_path, src, format="parquet")
    assert meta["items"] == 2 and originals(items) == ["14", "15"]


# ---------------------------------------------------------------- refused ids

# (file name, content, options, fragments of the message)
MISSING = {
    "csv_empty": ("log.csv", "user_id,item_id,timestamp\n1,10,1\n1,,2\n", {}, ["line 3"]),
    "csv_spaces": ("log.csv", "user_id,item_id,timestamp\n1,10,1\n1,   ,2\n", {}, ["line 3"]),
    "csv_nan": ("log.csv", "user_id,item_id,timestamp\n1,10,1\n1,NaN,2\n", {}, ["line 3"]),
    "csv_quoted_empty": ("log.csv", 'user_id,item_id,timestamp\n1,10,1\n1,"",2\n', {}, ["line 3"]),
    "jsonl_null": (
        "log.jsonl",
        '{"user_id":1,"item_id":10,"timestamp":1}\n\n{"user_id":1,"item_id":null,"timestamp":2}\n',
        {"format": "jsonl"},
        ["line 3"],  # the blank line 2 counts: lines are the file's
    ),
    "jsonl_blank_string": (
        "log.jsonl",
        '{"user_id":1,"item_id":"a","timestamp":1}\n{"user_id":1,"item_id":" ","timestamp":2}\n',
        {"format": "jsonl"},
        ["line 2"],
    ),
}


@pytest.mark.parametrize("case", list(MISSING))
def test_missing_ids_follow_null_ids(tmp_path, case):
    name, content, options, fragments = MISSING[case]
    src = tmp_path / name
    src.write_text(content)
    with pytest.raises(PrepError) as err:
        prepared(tmp_path, src, **options)
    message = str(err.value)
    for fragment in [name, "item id", "'item_id'", "missing", "null_ids=drop", *fragments]:
        assert fragment in message, (fragment, message)
    meta, items, _ = prepared(tmp_path, src, null_ids="drop", **options)
    assert meta["events"] == 1 and items.height == 1


def test_missing_ids_in_parquet_name_the_row(tmp_path):
    src = tmp_path / "log.parquet"
    frame = pl.DataFrame({"user_id": [1, 1, 1], "item_id": [1.0, None, float("nan")]})
    frame.with_columns(timestamp=pl.Series([1, 2, 3])).write_parquet(src)
    with pytest.raises(PrepError, match=r"log\.parquet, row 2: the item id .* missing"):
        prepared(tmp_path, src, format="parquet")
    meta, _, _ = prepared(tmp_path, src, format="parquet", null_ids="drop")
    assert meta["events"] == 1


INVALID_FLOATS = ["1.5", "-0.5", "inf", "-inf", "1e300", "12345678901234567890.0"]


@pytest.mark.parametrize("value", INVALID_FLOATS)
@pytest.mark.parametrize("null_ids", ["error", "drop"])
def test_float_ids_that_are_not_integers_are_refused(tmp_path, value, null_ids):
    """Even with null_ids=drop: a fractional id is a wrong column mapping, not a gap."""
    src = csv_log(tmp_path, ["14.0", "15.0", value])
    with pytest.raises(PrepError) as err:
        prepared(tmp_path, src, null_ids=null_ids)
    message = str(err.value)
    for fragment in ["log.csv", "line 4", "'item_id'", "not an integer id", "format.columns"]:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_float_ids_refused_in_typed_formats(tmp_path, fmt):
    rows = [{"user_id": 1, "item_id": v, "timestamp": t} for t, v in enumerate([1.0, 2.0, 2.5])]
    if fmt == "jsonl":
        src, where = write_jsonl(tmp_path / "log.jsonl", rows), "line 3"
    else:
        src, where = tmp_path / "log.parquet", "row 3"
        pl.DataFrame(rows).write_parquet(src)
    with pytest.raises(PrepError, match=f"{where}: the item id .*'item_id'.* 2.5"):
        prepared(tmp_path, src, format=fmt)


NOT_IDS = {
    "csv_bool": ("csv", "user_id,item_id,timestamp\n1,true,1\n1,false,2\n", "line 2"),
    "jsonl_bool": (
        "jsonl",
        '{"user_id":1,"item_id":true,"timestamp":1}\n{"user_id":1,"item_id":false,"timestamp":2}\n',
        "line 1",
    ),
    "jsonl_list": (
        "jsonl",
        '{"user_id":1,"item_id":[1],"timestamp":1}\n{"user_id":1,"item_id":[2],"timestamp":2}\n',
        "line 1",
    ),
    "jsonl_struct": (
        "jsonl",
        '{"user_id":1,"item_id":{"a":1},"timestamp":1}\n',
        "line 1",
    ),
    "parquet_bool": ("parquet", pl.Series([True, False]), "row 1"),
    "parquet_date": ("parquet", pl.Series([date(2024, 1, 1), date(2024, 1, 2)]), "row 1"),
    "parquet_list": ("parquet", pl.Series([[1], [2]]), "row 1"),
    "parquet_binary": ("parquet", pl.Series([b"a", b"b"]), "row 1"),
}


@pytest.mark.parametrize("case", list(NOT_IDS))
def test_columns_that_hold_no_ids_are_refused(tmp_path, case):
    fmt, content, where = NOT_IDS[case]
    src = tmp_path / f"log.{fmt}"
    if isinstance(content, pl.Series):
        pl.DataFrame({"user_id": [1, 1], "item_id": content, "timestamp": [1, 2]}).write_parquet(
            src
        )
    else:
        src.write_text(content)
    with pytest.raises(PrepError) as err:
        prepared(tmp_path, src, format=fmt)
    message = str(err.value)
    for fragment in [src.name, "item id", "'item_id'", "integers or text", where]:
        assert fragment in message, (fragment, message)


def test_cli_refuses_a_fractional_id_without_traceback(tmp_path):
    csv_log(tmp_path, ["14", "15.5", "16"])
    res = subprocess.run(
        [str(RECSYS_PREP), "input=log.csv", "output=out", "min_user_events=1"],
        cwd=tmp_path,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    for fragment in ["log.csv", "line 3", "'item_id'", "15.5"]:
        assert fragment in res.stderr, (fragment, res.stderr)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- property, end to end


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(min_value=0, max_value=10**12),
    spellings=st.lists(SPELLING, min_size=2, max_size=6),
)
def test_property_spellings_map_to_one_item_end_to_end(tmp_path, n, spellings):
    raw = [_spelling(n, *s).replace("\r", "") for s in spellings]
    rows = [{"user_id": 1, "item_id": v, "timestamp": t} for t, v in enumerate(raw)]
    rows.append({"user_id": 1, "item_id": "other", "timestamp": len(raw)})
    src = write_jsonl(tmp_path / "log.jsonl", rows)
    meta = prepare(
        {"input": src, "output": tmp_path / "o", "format": "jsonl", "min_user_events": 1}
    )
    items = pl.read_parquet(tmp_path / "o" / schema.ITEMS_FILE)
    assert meta["items"] == 2 and originals(items) == sorted([str(n), "other"])


# ---------------------------------------------------------------- id lists


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"14\n15\n", ["14", "15"]),
        (b"14", ["14"]),  # no final newline
        (b"\xef\xbb\xbf14\n15\n", ["14", "15"]),  # UTF-8 byte-order mark
        (b"14\r\n15\r\n", ["14", "15"]),  # CRLF
        (b"user_id\n14\n", ["14"]),
        (b"USER\n14\n", ["14"]),
        (b"\xef\xbb\xbfUserId\r\n14\r\n", ["14"]),
        (b"id\n14\n", ["14"]),
        (b"original_id\n14\n", ["14"]),
        (b'"14"\n"15"\n', ["14", "15"]),
        (b"user_id,score\n14,0.5\n15,0.1\n", ["14", "15"]),  # first column of a csv
        (b"14,a,b\n15\n16,c\n", ["14", "15", "16"]),  # ragged rows
        (b'"a,b",x\n"c""d"\n', ["a,b", 'c"d']),
        (b"\n14\n\n\n15\n\n", ["14", "15"]),  # blank lines
        (b"14\n 14 \n014\n14.0\n15\n14\n", ["14", "15"]),  # duplicates once, canonical
        (b"b\na\nb\nc\n", ["b", "a", "c"]),  # file order, not sorted
        (b"\xc3\xa9t\xc3\xa9\n", ["\u00e9t\u00e9"]),  # UTF-8 text ids
    ],
)
def test_read_id_list(tmp_path, content, expected):
    path = tmp_path / "users.txt"
    path.write_bytes(content)
    assert read_id_list(path) == expected


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        (b"", ["lists no user ids"]),
        (b"\n\n  \n", ["lists no user ids"]),
        (b"user_id\n", ["lists no user ids"]),
        (b"14\n\x00\x01\x02", ["line 2", "binary"]),
        (b"14\n15\n\xff\xfe\n", ["line 3", "UTF-8"]),
        (b'"14\n15\n', ["Could not read"]),  # an unclosed quote
    ],
)
def test_read_id_list_refuses(tmp_path, content, fragments):
    path = tmp_path / "users.txt"
    path.write_bytes(content)
    with pytest.raises(PrepError) as err:
        read_id_list(path)
    for fragment in ["users.txt", *fragments]:
        assert fragment in str(err.value), (fragment, str(err.value))


def test_read_id_list_refuses_missing_file_and_directory(tmp_path):
    with pytest.raises(PrepError, match="nowhere.txt.* does not exist"):
        read_id_list(tmp_path / "nowhere.txt")
    with pytest.raises(PrepError, match="is a directory"):
        read_id_list(tmp_path)


def test_id_list_matches_the_prepared_users(tmp_path):
    """The recommend side's lookup: an id list and users.parquet, canonicalised the same way."""
    src = csv_log(tmp_path, ["1", "2", "3", "4"], users=["u7", " 0042", "u7", "42.0"])
    _, _, users = prepared(tmp_path, src)
    known = set(canonical_series(users[schema.ORIGINAL_ID]).to_list())
    listing = tmp_path / "ask.csv"
    listing.write_text('user_id\n42\n"u7"\n00042.0\n')
    assert set(read_id_list(listing)) <= known and read_id_list(listing) == ["42", "u7"]
