"""Prep options mean what they say: bad values are refused naming the option, good ones
resolve to what they say, in :func:`data_prep.prepare` and through the real ``recsys-prep``
(exit status 2, one paragraph, no traceback). (Values in the log:
tests/test_prep_log_values.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from data_prep import schema
from data_prep.prep import resolve_config
from tests.helpers import history, refused, run, write

RECSYS_PREP = Path(sys.executable).parent / "recsys-prep"

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
