"""Bad input through the recsys-prep CLI: exit code != 0, one clear paragraph naming the file
(and the line or column), no traceback, and no partial output."""

from __future__ import annotations

import gzip
import os
import sys

import pytest

from data_prep import cli, prepare, read_meta
from recsys_seq.core import temporaries

GOOD = "user_id,item_id,timestamp\n1,10,100\n1,11,200\n1,12,300\n2,10,150\n2,12,250\n2,13,350\n"


def run_cli(monkeypatch, capsys, tmp_path, *args: str) -> tuple[int, str]:
    """Run recsys-prep in-process (fast: no interpreter start per case)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["recsys-prep", "output=out", *args])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
        sys.exit(0)
    err = capsys.readouterr().err  # progress lines (stage timings), then the error
    start = err.find("recsys-prep: error: ")
    return exit_info.value.code, err[start:] if start >= 0 else err


def write(tmp_path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return name


# logs past the sniffed head (64 KiB): each line of WIDE is a full record of five fields
WIDE = "user_id,item_id,timestamp,event_type,category\n" + "".join(
    f"{i % 100},{i % 50},{1000 + i},view,c{i % 7}\n" for i in range(4000)
)
DAT = "".join(f"{i % 100}::{i % 50}::{1 + i % 5}::{978300000 + i}\n" for i in range(4000))
CASES = {
    "missing_file": (None, [], ["not found", "nowhere.csv"]),
    "empty_file": (b"", [], ["log.csv", "empty"]),
    "header_only": ("user_id,item_id,timestamp\n", [], ["log.csv", "no data rows"]),
    "wrong_separator": (GOOD.replace(",", ";"), [], ["log.csv", "line 1", "';'"]),
    "missing_column": (
        "1,10,pv,100\n1,11,pv,200\n",
        ["format=taobao"],
        ["log.csv", "line 1", "4 fields", "has 5"],
    ),
    "extra_column": (
        "1,10,5,pv,100\n1,11,5,pv,200\n1,12,5,pv,300,9\n",
        ["format=taobao"],
        ["log.csv", "line 3", "6 fields"],
    ),
    "non_numeric_timestamp": (
        GOOD.replace("1,11,200", "1,11,yesterday"),
        [],
        ["log.csv", "line 3", "'timestamp'", "not a number"],
    ),
    "negative_timestamp": (GOOD.replace("2,12,250", "2,12,-250"), [], ["line 6", "negative"]),
    "absurd_timestamp": (
        GOOD.replace("1,12,300", "1,12,1511544070000"),
        [],
        ["line 4", "2100", "timestamp_unit=ms"],
    ),
    "null_user_id": (GOOD.replace("2,13,350", ",13,350"), [], ["line 7", "user id", "null_ids"]),
    "null_item_id": (GOOD.replace("1,11,200", "1,,200"), [], ["line 3", "item id"]),
    "mapping_absent_column": (GOOD, ["format.columns.item_id=product"], ["'product'", "log.csv"]),
    "binary_garbage": (bytes(range(256)) * 40, [], ["log.csv", "binary"]),
    "bad_gzip": (b"\x1f\x8b" + b"garbage" * 10, [], ["gzip"]),
    "filter_leaves_no_users": (GOOD, ["min_user_events=10"], ["No users left", "log.csv"]),
    "event_filter_without_column": (GOOD, ["event_types=[buy]"], ["event_type", "log.csv"]),
    "max_len_below_2": (GOOD, ["max_len=1"], ["max_len must be >= 2"]),
    "unknown_option_value": (GOOD, ["dedup=sometimes"], ["dedup must be one of"]),
    "not_parquet": (GOOD, ["format=parquet"], ["log.csv", "not a Parquet"]),
    "bad_jsonl": (GOOD, ["format=jsonl"], ["log.csv", "JSON"]),
    # a late short row: its event type and category would be silently missing
    "late_short_row": (
        WIDE + "7,3,999999\n",
        [],
        ["log.csv", "line 4002", "3 fields separated by ','", "the header (line 1) has 5"],
    ),
    "late_long_row": (WIDE + "7,3,999999,view,c1,9\n", [], ["line 4002", "6 fields"]),
    # the sniff leaves quoted lines to the parser: counted in full, quotes read as it reads them
    "quoted_short_row": (
        'user_id,item_id,timestamp,event_type,category\n1,10,100,view,"a,b"\n1,"11",200\n',
        [],
        ["line 3", "3 fields"],
    ),
    "short_row_after_quoted_newline": (
        'user_id,item_id,timestamp,event_type,category\n1,10,100,view,"a\nb"\n1,11,200,view\n',
        [],
        ["line 4", "4 fields"],
    ),
    # a late ratings.dat line with a field too many: its rating would be read as the clock
    "late_dat_line_with_an_extra_field": (
        DAT + "7::123::4::5::978309999\n",
        ["format=movielens_dat"],
        ["line 4001", "5 fields separated by '::'", "format.names"],
    ),
    "late_byte_that_is_not_utf_8": (
        WIDE.encode() + b"7,3,999999,view,caf\xe9\n",
        [],
        ["log.csv", "line 4002", "not UTF-8 text"],
    ),
    "json_lines_with_a_byte_order_mark": (
        b'\xef\xbb\xbf{"user_id": 1, "item_id": 10, "timestamp": 100}\n',
        ["format=jsonl"],
        ["log.csv starts with a UTF-8 byte-order mark", "without it"],
    ),
    "repeated_header_column": (
        "user_id,item_id,timestamp,item_id\n1,10,100,90\n1,11,200,91\n",
        [],
        ["log.csv, line 1", "names the column 'item_id' twice"],
    ),
    "late_dat_line_short": (DAT + "7::123::4\n", ["format=movielens_dat"], ["line 4001"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_exits_with_a_clear_message(monkeypatch, capsys, tmp_path, case):
    content, args, fragments = CASES[case]
    name = "bad.csv.gz" if case == "bad_gzip" else "log.csv"
    source = "nowhere.csv" if content is None else write(tmp_path, name, content)
    code, err = run_cli(monkeypatch, capsys, tmp_path, f"input={source}", *args)
    assert code == 2
    assert err.startswith("recsys-prep: error: ") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err  # one paragraph
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_failure_keeps_previous_output_and_drops_stale_folders(monkeypatch, capsys, tmp_path):
    write(tmp_path, "log.csv", GOOD)
    code, _ = run_cli(monkeypatch, capsys, tmp_path, "input=log.csv", "min_user_events=1")
    assert code in (0, None)
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    # a job killed mid-run leaves its private folder; the next run removes it
    host = temporaries.tag().split("-")[0]  # this machine, as publishing names it
    stale = tmp_path / f".out.tmp-{host}-999999999-deadbeef"
    (stale / "_work").mkdir(parents=True)
    write(tmp_path, "log.csv", GOOD.replace("1,11,200", "1,11,yesterday"))
    code, err = run_cli(monkeypatch, capsys, tmp_path, "input=log.csv", "min_user_events=1")
    assert code == 2 and "line 3" in err
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_quoted_separators_and_newlines_in_a_log_are_values(tmp_path):
    """Valid CSV: a category holding the separator and a newline is one value, and the sniff
    does not count the lines of a quoted value as records."""
    src = tmp_path / "log.csv"
    src.write_text(
        "user_id,item_id,timestamp,event_type,category\n"
        '1,10,100,view,"a,b"\n1,11,200,view,"multi\nline\nc"\n1,12,300,buy,d\n'
    )
    meta = prepare({"input": src, "output": tmp_path / "o", "min_user_events": 1})
    assert meta["events"] == 3


def test_null_ids_drop_skips_rows(tmp_path):
    src = tmp_path / "log.csv"
    src.write_text(GOOD.replace("2,13,350", ",13,350"))
    meta = prepare(
        {"input": src, "output": tmp_path / "o", "null_ids": "drop", "min_user_events": 1}
    )
    assert meta["events"] == 5 and read_meta(tmp_path / "o")["users"] == 2
    assert (meta["rows_read"], meta["rows_without_ids"]) == (6, 1)  # what was dropped, counted


def test_cli_subprocess_reports_without_traceback(tmp_path):
    import subprocess

    (tmp_path / "log.csv.gz").write_bytes(gzip.compress(b""))
    res = subprocess.run(
        [sys.executable, "-m", "data_prep", "input=log.csv.gz", "output=out"],
        cwd=tmp_path,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "log.csv.gz" in res.stderr and "empty" in res.stderr
    assert "Traceback" not in res.stderr + res.stdout
