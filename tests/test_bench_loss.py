"""recsys-bench task=loss: a tiny run measures every configuration in its own process, compares
with the dense path, writes its rows, and never runs what would not fit."""

import json

import pytest
from hydra import compose, initialize_config_dir

from recsys_seq.bench.loss import estimated_bytes, run
from recsys_seq.cli.bench import run_task
from recsys_seq.configs import CONF_DIR
from recsys_seq.core.errors import UserError

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick


def test_a_tiny_run_measures_each_configuration_and_writes_the_rows(tmp_path, capsys):
    output = tmp_path / "loss.json"
    rows = run(
        items=[40],
        rows=24,
        dim=8,
        methods=["plain", "chunked", "in_batch", "mixed"],
        precisions=["bf16"],
        chunk_size=16,
        row_chunk_size=10,
        repeats=2,
        device="cpu",
        threads=1,
        output=str(output),
    )
    assert [r["method"] for r in rows] == ["plain", "chunked", "in_batch", "mixed"]
    for row in rows:
        assert row["note"] == "" and row["step_s"] > 0 and row["peak_mb"] >= 0, row
        assert row["precision"] == "bf16"
    plain, chunked, *_ = rows
    assert chunked["time_vs_plain"] == pytest.approx(plain["step_s"] / chunked["step_s"])
    if chunked["peak_mb"] > 0:  # a tiny step may not grow the resident set by a page
        assert chunked["memory_vs_plain"] == pytest.approx(plain["peak_mb"] / chunked["peak_mb"])
    assert plain["time_vs_plain"] is None
    written = json.loads(output.read_text())
    assert written["benchmark"] == "loss" and written["rows"] == rows
    assert "loss step on cpu" in capsys.readouterr().out


def test_a_configuration_that_would_not_fit_is_a_row_with_its_estimate(tmp_path):
    """Dense logits of 6400 x 1M floats (25.6 GB a copy) are never attempted."""
    rows = run(items=[1_000_000], methods=["plain"], precisions=["fp32"], device="cpu")
    (row,) = rows
    assert row["step_s"] is None and row["note"].startswith("skipped: needs ~")
    assert estimated_bytes("plain", 1_000_000, 6400, 64, 1024**2) > 25.6e9
    assert estimated_bytes("chunked", 1_000_000, 6400, 64, 1024**2) < 1e9
    assert estimated_bytes("in_batch", 1_000_000, 6400, 64, 1024**2) < 2e9  # no (rows, N)


def test_a_configuration_that_fails_is_a_row_with_the_error():
    (row,) = run(items=[10], rows=4, dim=2, methods=["plain"], precisions=["fp32"], device="bad")
    assert row["step_s"] is None and row["note"].startswith("failed: ")


def bench(*overrides: str):
    with initialize_config_dir(CONF_DIR, version_base="1.3"):
        return run_task(compose("bench", overrides=["task=loss", *overrides]))


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["methods=[fast]"], "Unknown method(s) fast; known: plain, chunked, compiled"),
        (["precisions=[fp8]"], "Unknown precision(s) fp8"),
        (["chunk_size=0"], "chunk_size, rows, dim and repeats must be >= 1"),
        (["rows=abc"], "rows must be an integer"),
        (["datasets=[ml_1m]"], "recsys-bench task=loss takes: items"),
    ],
)
def test_bad_options_are_refused_before_any_work(overrides, fragment):
    with pytest.raises(UserError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        bench(*overrides)
