"""Values in a log mean what they say: ratings, timestamps, and errors that name the line.

Every case goes through :func:`data_prep.prepare` on a tiny file in tmp_path. A value is either
used as what it says or refused with one paragraph naming the file, the line (or Parquet row)
and the column; never silently turned into something else. (Prep options:
tests/test_prep_option_values.py.)
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_prep.lines import INFER_ROWS
from tests.helpers import history, refused, run, write

T0 = 1_704_067_200  # 2024-01-01T00:00:00Z


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


# ---------------------------------------------------------------- ratings


def rating_log(values: list[str]) -> str:
    rows = [f"1,{10 + i},{i},{v}" for i, v in enumerate(values)]
    return "user_id,item_id,timestamp,rating\n" + "\n".join(rows) + "\n"


def test_nan_rating_never_passes_a_threshold(tmp_path):
    """The reported case: NaN passed min_rating=5 while 4.5 was dropped."""
    src = write(tmp_path, "log.csv", rating_log(["5", "NaN", "4.5", "5.0"]))
    refused(
        tmp_path, src, ["log.csv", "line 3", "'rating'", "missing", "null_ids=drop"], min_rating=5
    )
    run(tmp_path, src, min_rating=5, null_ids="drop")
    assert history(tmp_path)[0] == [10, 13]


MISSING_RATINGS = ["NaN", "nan", "", "  ", "-nan"]


@pytest.mark.parametrize("missing", MISSING_RATINGS)
def test_missing_ratings_are_refused_or_dropped(tmp_path, missing):
    src = write(tmp_path, "log.csv", rating_log(["4", missing, "5"]))
    refused(tmp_path, src, ["log.csv", "line 3", "'rating'", "missing"], min_rating=1)
    run(tmp_path, src, min_rating=1, null_ids="drop")
    assert history(tmp_path)[0] == [10, 12]


UNREADABLE_RATINGS = ["abc", "5 stars", "inf", "-inf", "4,5", "true", "☆☆☆"]


@pytest.mark.parametrize("bad", UNREADABLE_RATINGS)
@pytest.mark.parametrize("null_ids", ["error", "drop"])
def test_ratings_that_are_not_numbers_are_refused(tmp_path, bad, null_ids):
    src = write(tmp_path, "log.csv", rating_log(["4", "5", bad]).replace(",4,5", ',"4,5"'))
    refused(
        tmp_path,
        src,
        ["log.csv", "line 4", "'rating'", "not a number", "format.columns.rating"],
        min_rating=1,
        null_ids=null_ids,
    )


def test_unused_rating_column_is_not_checked(tmp_path):
    """Without min_rating the rating column is never read: junk in it is no error."""
    src = write(tmp_path, "log.csv", rating_log(["abc", "NaN", ""]))
    assert run(tmp_path, src)["events"] == 3


@pytest.mark.parametrize(
    ("column", "fragments"),
    [
        (pl.Series([4.0, float("nan"), 5.0]), ["row 2", "missing"]),
        (pl.Series([4.0, None, 5.0]), ["row 2", "missing"]),
        (pl.Series([4.0, float("inf"), 5.0]), ["row 2", "not a number"]),
        (pl.Series([True, False, True]), ["Boolean", "numeric ratings"]),
        (pl.Series([[4], [5], [1]]), ["List", "numeric ratings"]),
    ],
    ids=["nan", "null", "inf", "bool", "list"],
)
def test_parquet_ratings(tmp_path, column, fragments):
    frame = pl.DataFrame({"user_id": [1, 1, 1], "item_id": [1, 2, 3], "timestamp": [1, 2, 3]})
    src = write(tmp_path, "log.parquet", frame.with_columns(rating=column))
    fmt = {"name": "parquet", "reader": "parquet", "columns": {**IDENTITY, "rating": "rating"}}
    refused(tmp_path, src, ["log.parquet", "'rating'", *fragments], format=fmt, min_rating=4)


IDENTITY = {"user_id": "user_id", "item_id": "item_id", "timestamp": "timestamp"}


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ratings=st.lists(
        st.one_of(st.floats(allow_nan=True, allow_infinity=False), st.none()),
        min_size=1,
        max_size=12,
    ),
    threshold=st.floats(min_value=-5, max_value=5),
)
def test_property_kept_events_are_exactly_the_ratings_above_threshold(tmp_path, ratings, threshold):
    frame = pl.DataFrame(
        {
            "user_id": [1] * (len(ratings) + 1),
            "item_id": list(range(len(ratings) + 1)),
            "timestamp": list(range(len(ratings) + 1)),
            "rating": [*ratings, 100.0],  # one event always kept
        }
    )
    src = write(tmp_path, "log.parquet", frame)
    fmt = {"name": "parquet", "reader": "parquet", "columns": {**IDENTITY, "rating": "rating"}}
    run(tmp_path, src, format=fmt, min_rating=threshold, null_ids="drop")
    expected = [i for i, r in enumerate([*ratings, 100.0]) if r is not None and r >= threshold]
    assert history(tmp_path)[0] == expected


# ---------------------------------------------------------------- timestamps

ISO_CASES = {
    "utc_z": ("2024-01-01T00:00:00Z", T0),
    "lower_z": ("2024-01-01T00:00:00z", T0),
    "plus_two": ("2024-01-01T02:00:00+02:00", T0),
    "minus_five": ("2023-12-31T19:00:00-05:00", T0),
    "compact_offset": ("2024-01-01T02:00:00+0200", T0),
    "hour_offset": ("2024-01-01T02:00:00+02", T0),
    "fraction_z": ("2024-01-01T00:00:00.750Z", T0),
    "naive": ("2024-01-01T00:00:00", T0),
    "naive_space": ("2024-01-01 00:00:00", T0),
    "no_seconds": ("2024-01-01T00:00", T0),
    "no_seconds_offset": ("2024-01-01T01:00+01:00", T0),
    "date": ("2024-01-01", T0),
    "padded": ("  2024-01-01T00:00:00Z ", T0),
    "number": ("1704067200", T0),
}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("case", list(ISO_CASES))
def test_time_strings_are_utc(tmp_path, case, fmt):
    text, expected = ISO_CASES[case]
    times = [text, "2024-01-01T00:00:10Z"]  # a second string so the column stays text
    if fmt == "csv":
        src = write(
            tmp_path,
            "log.csv",
            "user_id,item_id,timestamp\n" + "".join(f'1,{i},"{t}"\n' for i, t in enumerate(times)),
        )
    else:
        rows = [{"user_id": 1, "item_id": i, "timestamp": t} for i, t in enumerate(times)]
        src = write(tmp_path, "log.jsonl", jsonl(rows))
    run(tmp_path, src, format=fmt)
    assert history(tmp_path)[1] == [expected, T0 + 10]


def test_mixed_offsets_and_naive_times_order_by_the_real_instant(tmp_path):
    rows = [
        {"user_id": 1, "item_id": "a", "timestamp": "2024-01-01T03:00:00+02:00"},  # 01:00Z
        {"user_id": 1, "item_id": "b", "timestamp": "2024-01-01T00:30:00Z"},
        {"user_id": 1, "item_id": "c", "timestamp": "2024-01-01T00:45:00"},  # naive: UTC
        {"user_id": 1, "item_id": "d", "timestamp": "2023-12-31T20:00:00-05:00"},  # 01:00Z + 0
    ]
    run(tmp_path, write(tmp_path, "log.jsonl", jsonl(rows)), format="jsonl")
    items, times = history(tmp_path)
    assert items == ["b", "c", "a", "d"]  # a and d tie: file order
    assert times == [T0 + 1800, T0 + 2700, T0 + 3600, T0 + 3600]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_time_strings_in_every_unit(tmp_path, unit):
    rows = [{"user_id": 1, "item_id": i, "timestamp": "2024-01-01T00:00:01.5Z"} for i in (1, 2)]
    src = write(tmp_path, "log.jsonl", jsonl(rows))
    fmt = {"name": "jsonl", "reader": "jsonl", "columns": IDENTITY, "timestamp_unit": unit}
    run(tmp_path, src, format=fmt)
    scale = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    assert history(tmp_path)[1][0] == T0 * scale + (3 * scale) // 2


UTC = timezone.utc


NAIVE = pl.Series([datetime(2024, 1, 1, 2), datetime(2024, 1, 1, 2, 0, 10)])


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        (NAIVE, T0 + 7200),  # naive: UTC
        (NAIVE.dt.replace_time_zone("UTC"), T0 + 7200),
        (NAIVE.dt.replace_time_zone("Europe/Berlin"), T0 + 3600),  # 02:00 CET is 01:00Z
        (NAIVE.dt.replace_time_zone("America/New_York"), T0 + 7200 + 5 * 3600),
        (NAIVE.cast(pl.Datetime("ms")), T0 + 7200),
        (NAIVE.cast(pl.Datetime("ns")), T0 + 7200),
    ],
    ids=["naive", "utc", "berlin", "new_york", "ms", "ns"],
)
def test_parquet_datetimes(tmp_path, column, expected):
    frame = pl.DataFrame({"user_id": [1, 1], "item_id": [1, 2], "timestamp": column})
    run(tmp_path, write(tmp_path, "log.parquet", frame), format="parquet")
    assert history(tmp_path)[1] == [expected, expected + 10]


def test_parquet_dates(tmp_path):
    frame = pl.DataFrame(
        {"user_id": [1, 1], "item_id": [1, 2], "timestamp": [date(2024, 1, 1), date(2024, 1, 2)]}
    )
    run(tmp_path, write(tmp_path, "log.parquet", frame), format="parquet")
    assert history(tmp_path)[1] == [T0, T0 + 86_400]


# (file name, content, fragments): values that are no times, refused naming column and line
NOT_TIMES = {
    "csv_word": ("log.csv", "user_id,item_id,timestamp\n1,1,5\n1,2,yesterday\n", ["line 3"]),
    "csv_bad_month": (
        "log.csv",
        "user_id,item_id,timestamp\n1,1,2024-01-01\n1,2,2024-13-01\n",
        ["line 3", "2024-13-01"],
    ),
    "csv_time_only": (
        "log.csv",
        "user_id,item_id,timestamp\n1,1,2024-01-01\n1,2,12:00\n",
        ["line 3", "12:00"],
    ),
    "csv_nan": ("log.csv", "user_id,item_id,timestamp\n1,1,5.0\n1,2,NaN\n", ["line 3"]),
    "csv_inf": ("log.csv", "user_id,item_id,timestamp\n1,1,5.0\n1,2,inf\n", ["line 3"]),
    "csv_bool": ("log.csv", "user_id,item_id,timestamp\n1,1,true\n1,2,false\n", ["Boolean"]),
    "jsonl_bool": (
        "log.jsonl",
        jsonl([{"user_id": 1, "item_id": i, "timestamp": b} for i, b in enumerate([True, False])]),
        ["Boolean", "line 1"],
    ),
    "jsonl_list": (
        "log.jsonl",
        jsonl([{"user_id": 1, "item_id": 1, "timestamp": [1, 2]}]),
        ["List", "line 1"],
    ),
    "jsonl_struct": (
        "log.jsonl",
        jsonl([{"user_id": 1, "item_id": 1, "timestamp": {"s": 1}}]),
        ["Struct", "line 1"],
    ),
    "jsonl_word": (
        "log.jsonl",
        "\n"
        + jsonl([{"user_id": 1, "item_id": i, "timestamp": t} for i, t in enumerate(["5", "x"])]),
        ["line 3", "'x'"],  # after a blank first line
    ),
    "parquet_bool": (
        "log.parquet",
        pl.DataFrame({"user_id": [1, 1], "item_id": [1, 2], "timestamp": [True, False]}),
        ["Boolean", "row 1"],
    ),
    "parquet_duration": (
        "log.parquet",
        pl.DataFrame({"user_id": [1], "item_id": [1], "timestamp": [timedelta(seconds=5)]}),
        ["Duration", "row 1"],
    ),
    "parquet_struct": (
        "log.parquet",
        pl.DataFrame({"user_id": [1], "item_id": [1], "timestamp": [{"s": 1}]}),
        ["Struct", "row 1"],
    ),
    "parquet_word": (
        "log.parquet",
        pl.DataFrame({"user_id": [1, 1], "item_id": [1, 2], "timestamp": ["5", "soon"]}),
        ["row 2", "'soon'"],
    ),
}


@pytest.mark.parametrize("case", list(NOT_TIMES))
@pytest.mark.parametrize("null_ids", ["error", "drop"])
def test_values_that_are_no_times_are_refused(tmp_path, case, null_ids):
    name, content, fragments = NOT_TIMES[case]
    src = write(tmp_path, name, content)
    fmt = name.rsplit(".", 1)[1]
    refused(tmp_path, src, [name, "timestamp", *fragments], format=fmt, null_ids=null_ids)


# ---------------------------------------------------------------- where errors point


def test_jsonl_syntax_error_names_the_line_and_a_json_hint(tmp_path):
    good = jsonl([{"user_id": 1, "item_id": i, "timestamp": i} for i in range(5)])
    src = write(
        tmp_path, "log.jsonl", good + "\n" + '{"user_id": 1, "item_id": 9, "timestamp": NaN}\n'
    )
    message = refused(tmp_path, src, ["log.jsonl", "line 7", "JSON object"], format="jsonl")
    assert "separator" not in message


def test_jsonl_truncated_line(tmp_path):
    src = write(
        tmp_path, "log.jsonl", '{"user_id":1,"item_id":1,"timestamp":1}\n{"user_id":1,"item_'
    )
    refused(tmp_path, src, ["log.jsonl", "line 2"], format="jsonl")


@pytest.mark.parametrize("late", [True, "abc", [1], {"a": 1}, 1.5])
def test_jsonl_type_change_after_the_inferred_rows_names_the_line(tmp_path, late):
    rows = [{"user_id": 1, "item_id": i, "timestamp": i} for i in range(INFER_ROWS + 5)]
    rows[INFER_ROWS + 2]["item_id"] = late
    src = write(tmp_path, "log.jsonl", jsonl(rows))
    message = refused(tmp_path, src, ["log.jsonl", f"line {INFER_ROWS + 3}"], format="jsonl")
    assert "separator" not in message


@pytest.mark.parametrize(
    ("first", "second"),
    [([1], 1), (1, [1]), ({"a": 1}, 1), (1, {"a": 1}), (True, 1), (1, True)],
)
def test_jsonl_type_conflict_in_the_first_rows_names_the_line(tmp_path, first, second):
    rows = [{"user_id": 1, "item_id": v, "timestamp": t} for t, v in enumerate([first, second])]
    src = write(tmp_path, "log.jsonl", "\n" + jsonl(rows))
    refused(tmp_path, src, ["log.jsonl", "line 3", "JSON object"], format="jsonl")


@pytest.mark.parametrize("late", ["14.5", "abc", "99999999999999999999"])
def test_csv_value_after_the_inferred_rows_names_the_line(tmp_path, late):
    rows = [f"1,{i},{i}" for i in range(INFER_ROWS + 5)]
    rows[INFER_ROWS + 2] = f"1,{late},5"
    src = write(tmp_path, "log.csv", "user_id,item_id,timestamp\n" + "\n".join(rows) + "\n")
    refused(tmp_path, src, ["log.csv", f"line {INFER_ROWS + 4}", "'item_id'", late])


def test_jsonl_missing_key_hint(tmp_path):
    src = write(tmp_path, "log.jsonl", jsonl([{"user": 1, "item_id": 1, "timestamp": 1}]))
    message = refused(tmp_path, src, ["log.jsonl", "'user_id'", "keys"], format="jsonl")
    assert "separator" not in message


def test_multichar_separator_late_value_names_the_line(tmp_path):
    lines = [f"1::{i}::5::{i}" for i in range(1500)]
    lines[1200] = "1::12x::5::1200"
    src = write(tmp_path, "ratings.dat", "\n".join(lines) + "\n")
    refused(
        tmp_path, src, ["ratings.dat", "line 1201", "'item_id'", "'12x'"], format="movielens_dat"
    )


def test_user_lines_name_the_line(tmp_path):
    src = write(tmp_path, "Beauty.txt", "1 5 6\n\n3\n2 7  8\n")  # a double space: no item
    refused(tmp_path, src, ["Beauty.txt", "line 4", "item id", "missing"], format="s3rec_txt")


def test_parquet_missing_column_hint(tmp_path):
    frame = pl.DataFrame({"user": [1], "item_id": [1], "timestamp": [1]})
    message = refused(
        tmp_path,
        write(tmp_path, "log.parquet", frame),
        ["log.parquet", "'user_id'"],
        format="parquet",
    )
    assert "separator" not in message
