"""Values mean what they say: ratings, timestamps, line numbers and prep options.

Every case goes through :func:`data_prep.prepare` (a few through the real ``recsys-prep``) on
a tiny file in tmp_path. A value is either used as what it says or refused with one paragraph
naming the file, the line (or Parquet row) and the column, or the option; never silently
turned into something else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_prep import PrepError, prepare, schema
from data_prep.lines import INFER_ROWS
from data_prep.prep import resolve_config

RECSYS_PREP = Path(sys.executable).parent / "recsys-prep"
T0 = 1_704_067_200  # 2024-01-01T00:00:00Z


def write(tmp_path: Path, name: str, content: str | bytes | pl.DataFrame) -> Path:
    path = tmp_path / name
    if isinstance(content, pl.DataFrame):
        content.write_parquet(path)
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def run(tmp_path: Path, src: Path, **cfg) -> dict:
    return prepare({"input": src, "output": tmp_path / "out", "min_user_events": 1, **cfg})


def history(tmp_path: Path) -> tuple[list, list[int]]:
    """The first user's items (original ids) and timestamps, in time order."""
    items = pl.read_parquet(tmp_path / "out" / schema.ITEMS_FILE)
    back = dict(zip(items[schema.ITEM], items[schema.ORIGINAL_ID], strict=True))
    seqs = pl.read_parquet(tmp_path / "out" / schema.SEQUENCES_FILE)
    return [back[i] for i in seqs[schema.ITEMS][0]], seqs[schema.TIMESTAMPS][0].to_list()


def refused(tmp_path: Path, src: Path, fragments: list[str], **cfg) -> str:
    with pytest.raises(PrepError) as err:
        run(tmp_path, src, **cfg)
    message = str(err.value)
    assert "\n" not in message.strip(), message  # one paragraph
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert not (tmp_path / "out").exists()
    return message


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


# ---------------------------------------------------------------- options

GOOD = "user_id,item_id,timestamp,event_type\n1,10,100,buy\n1,11,200,view\n1,12,300,buy\n"

BAD_OPTIONS = {
    "max_len_text": ({"max_len": "abc"}, "max_len"),
    "max_len_float": ({"max_len": 12.5}, "max_len"),
    "max_len_integral_float": ({"max_len": 12.0}, "max_len"),
    "max_len_bool": ({"max_len": True}, "max_len"),
    "max_len_list": ({"max_len": [12]}, "max_len"),
    "max_len_none": ({"max_len": None}, "max_len"),
    "max_len_small": ({"max_len": 1}, "max_len"),
    "min_user_events_float": ({"min_user_events": 1.5}, "min_user_events"),
    "min_user_events_zero": ({"min_user_events": 0}, "min_user_events"),
    "min_item_events_text": ({"min_item_events": "many"}, "min_item_events"),
    "max_buckets_list": ({"max_buckets": [1]}, "max_buckets"),
    "max_buckets_false": ({"max_buckets": False}, "max_buckets"),
    "partitions_text": ({"partitions": "some"}, "partitions"),
    "partitions_zero": ({"partitions": 0}, "partitions"),
    "split_cut_quantile_text": ({"split_cut_quantile": "x"}, "split_cut_quantile"),
    "split_cut_quantile_one": ({"split_cut_quantile": 1}, "split_cut_quantile"),
    "split_cut_quantile_nan": ({"split_cut_quantile": float("nan")}, "split_cut_quantile"),
    "split_cut_quantile_bool": ({"split_cut_quantile": True}, "split_cut_quantile"),
    "bucket_waste_negative": ({"bucket_waste": -0.1}, "bucket_waste"),
    "bucket_waste_list": ({"bucket_waste": [0.1]}, "bucket_waste"),
    "min_rating_text": ({"min_rating": "four"}, "min_rating"),
    "min_rating_nan": ({"min_rating": float("nan")}, "min_rating"),
    "min_rating_bool": ({"min_rating": True}, "min_rating"),
    "min_rating_inf": ({"min_rating": "inf"}, "min_rating"),
    "start_time_bool": ({"start_time": True}, "start_time"),
    "start_time_word": ({"start_time": "yesterday"}, "start_time"),
    "start_time_fraction": ({"start_time": 1.5}, "start_time"),
    "start_time_list": ({"start_time": [1]}, "start_time"),
    "end_time_bad_date": ({"end_time": "2024-02-30"}, "end_time"),
    "split_cut_bool": ({"split_cut": False, "split": "temporal"}, "split_cut"),
    "event_types_bool": ({"event_types": True}, "event_types"),
    "event_types_float": ({"event_types": [1.5]}, "event_types"),
    "event_types_nested": ({"event_types": [["buy"]]}, "event_types"),
    "event_types_empty": ({"event_types": []}, "event_types"),
    "event_types_mapping": ({"event_types": {"buy": 1}}, "event_types"),
    "side_features_word": ({"side_features": "colour"}, "colour"),
    "side_features_number": ({"side_features": 3}, "side feature"),
    "dedup_list": ({"dedup": ["all"]}, "dedup"),
    "split_bool": ({"split": True}, "split"),
    "null_ids_other": ({"null_ids": "skip"}, "null_ids"),
    "reuse_existing_text": ({"reuse_existing": "yes"}, "reuse_existing"),
    "format_list": ({"format": ["csv"]}, "format"),
    "timestamp_unit": ({"format": {"name": "x", "reader": "csv", "timestamp_unit": "h"}}, "unit"),
}


@pytest.mark.parametrize("case", list(BAD_OPTIONS))
def test_bad_option_values_are_one_paragraph_naming_the_option(tmp_path, case):
    options, name = BAD_OPTIONS[case]
    src = write(tmp_path, "log.csv", GOOD)
    message = refused(tmp_path, src, [name], **options)
    assert "Traceback" not in message


@pytest.mark.parametrize(
    ("options", "resolved"),
    [
        ({"max_len": "12"}, {"max_len": 12}),
        ({"max_len": " 12 "}, {"max_len": 12}),
        ({"min_user_events": "+2"}, {"min_user_events": 2}),
        ({"partitions": "3"}, {"partitions": 3}),
        ({"partitions": "auto"}, {"partitions": "auto"}),
        ({"split_cut_quantile": "0.8"}, {"split_cut_quantile": 0.8}),
        ({"min_rating": 4}, {"min_rating": 4}),
        ({"min_rating": "4.5"}, {"min_rating": 4.5}),
        ({"bucket_waste": 0}, {"bucket_waste": 0}),
        ({"event_types": "buy"}, {"event_types": ["buy"]}),
        ({"event_types": ("buy", "cart")}, {"event_types": ["buy", "cart"]}),
        ({"event_types": [1, 2]}, {"event_types": ["1", "2"]}),
        ({"side_features": "gap"}, {"side_features": ["gap"]}),
        ({"side_features": None}, {"side_features": []}),
        ({"side_features": []}, {"side_features": []}),
        ({"start_time": 1_511_539_200}, {"start_time": 1_511_539_200}),
        ({"start_time": "1511539200"}, {"start_time": 1_511_539_200}),
        ({"start_time": 1_511_539_200.0}, {"start_time": 1_511_539_200}),
        ({"start_time": "2017-11-25"}, {"start_time": 1_511_568_000}),
        ({"start_time": date(2017, 11, 25)}, {"start_time": 1_511_568_000}),
        ({"start_time": "2017-11-25T00:00:00+08:00"}, {"start_time": 1_511_539_200}),
        ({"start_time": "2017-11-24T16:00:00Z"}, {"start_time": 1_511_539_200}),
        ({"start_time": "2017-11-24 16:00"}, {"start_time": 1_511_539_200}),
        (
            {"end_time": datetime(2017, 11, 25, 8, tzinfo=timezone(timedelta(hours=8)))},
            {"end_time": 1_511_568_000},
        ),
        ({"end_time": datetime(2017, 11, 25)}, {"end_time": 1_511_568_000}),
        ({"split_cut": "2017-11-25T00:00:00.000Z"}, {"split_cut": 1_511_568_000}),
    ],
)
def test_option_values_that_mean_what_they_say(tmp_path, options, resolved):
    cfg = resolve_config({"input": "log.csv", "output": str(tmp_path / "o"), **options})
    for key, value in resolved.items():
        assert cfg[key] == value and type(cfg[key]) is type(value), (key, cfg[key])


def test_time_options_follow_the_log_unit():
    cfg = resolve_config(
        {
            "input": "log.csv",
            "output": "o",
            "format": {"name": "csv", "reader": "csv", "timestamp_unit": "ms"},
            "start_time": "2017-11-25T00:00:00.250Z",
            "end_time": 1_511_568_000_000,
        }
    )
    assert cfg["start_time"] == 1_511_568_000_250 and cfg["end_time"] == 1_511_568_000_000


def test_single_event_type_filters_by_the_whole_name(tmp_path):
    """event_types=buy was ['b', 'u', 'y']: it keeps the buy events."""
    meta = run(tmp_path, write(tmp_path, "log.csv", GOOD), event_types="buy")
    assert meta["events"] == 2 and history(tmp_path)[0] == [10, 12]


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(RECSYS_PREP), "output=out", *args],
        cwd=tmp_path,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["max_len=abc"], ["max_len", "'abc'"]),
        (["min_user_events=1.5"], ["min_user_events", "1.5"]),
        (["split_cut_quantile=x"], ["split_cut_quantile", "'x'"]),
        (["max_buckets=[1]"], ["max_buckets", "[1]"]),
        (["start_time=true"], ["start_time", "True"]),
        (["min_rating=1", "input=bad.csv"], ["bad.csv", "line 3", "'rating'", "nan"]),
    ],
)
def test_cli_bad_values_exit_2_without_traceback(tmp_path, args, fragments):
    write(tmp_path, "log.csv", GOOD)
    write(tmp_path, "bad.csv", "user_id,item_id,timestamp,rating\n1,10,5,4\n1,11,6,NaN\n")
    if not any(a.startswith("input=") for a in args):
        args = ["input=log.csv", *args]
    res = cli(tmp_path, *args)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    error = res.stderr[res.stderr.find("recsys-prep: error: ") :]
    assert error and len(error.strip().splitlines()) == 1, res.stderr
    for fragment in fragments:
        assert fragment in error, (fragment, error)
    assert not (tmp_path / "out").exists()


def test_cli_single_event_type(tmp_path):
    write(tmp_path, "log.csv", GOOD)
    res = cli(tmp_path, "input=log.csv", "event_types=buy", "min_user_events=1")
    assert res.returncode == 0, res.stderr
    meta = json.loads((tmp_path / "out" / schema.META_FILE).read_text())
    assert meta["config"]["event_types"] == ["buy"] and meta["events"] == 2
