"""recsys-report through its real command line over run folders that are broken or hostile.

One real run is made with ``recsys-train`` (a few batches); sweeps are built from copies of it,
some corrupted in one way each. The report must skip each unreadable run with one warning line
naming it and the reason, report the rest (exit 0), stop with one error paragraph and exit 2
when nothing readable is left (writing nothing), and never call anything a file names.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
import yaml

from data_prep.demo import prepare_demo

pytestmark = pytest.mark.slow  # one real training run, then the command line a few times

BIN = Path(sys.executable).parent
WARNING = "recsys-report: warning: skipping "
DEBUG = "include_debug=true"  # the good run trains on a few batches: a debug run


def run_command(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    """A real run folder written by ``recsys-train``: metrics.json, .hydra/ (config.yaml,
    overrides.yaml, hydra.yaml), csv/metrics.csv."""
    root = tmp_path_factory.mktemp("source")
    data = prepare_demo(root / "demo")
    run = root / "good"
    made = run_command(
        BIN / "recsys-train",
        f"data.path={data}",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "callbacks.progress_bar=null",
        "callbacks.model_summary=null",
        f"hydra.run.dir={run}",
        cwd=root,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    return run


def place(good: Path, target: Path) -> Path:
    """A copy of the good run (without its checkpoints) at ``target``."""
    return Path(shutil.copytree(good, target, ignore=shutil.ignore_patterns("checkpoints")))


# ---------------------------------------------------------------------------- corruptions


def write(name: str, data: bytes | str) -> Callable[[Path], None]:
    def corrupt(run: Path) -> None:
        path = run / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())

    return corrupt


def metric(key: str, value: object) -> Callable[[Path], None]:
    def corrupt(run: Path) -> None:
        metrics = json.loads((run / "metrics.json").read_text())
        metrics[key] = value
        (run / "metrics.json").write_text(json.dumps(metrics))

    return corrupt


def truncate(name: str) -> Callable[[Path], None]:
    def corrupt(run: Path) -> None:
        data = (run / name).read_bytes()
        (run / name).write_bytes(data[: len(data) // 2])

    return corrupt


def folder_instead(name: str) -> Callable[[Path], None]:
    def corrupt(run: Path) -> None:
        (run / name).unlink()
        (run / name).mkdir()

    return corrupt


def dangling(name: str) -> Callable[[Path], None]:
    def corrupt(run: Path) -> None:
        (run / name).unlink()
        (run / name).symlink_to(run / "nowhere.json")

    return corrupt


REPORT_FILES = (
    "report.csv",
    "report.md",
    "metrics.png",
    "val_curves.png",
    "length_histogram_demo.png",
    ".recsys-seq.json",
)
MARKER = "called.txt"  # what the hostile configs below would create if anything ran them

BROKEN = {
    "metrics-not-json": (write("metrics.json", "{oops"), "metrics.json is not valid JSON"),
    "metrics-empty": (write("metrics.json", ""), "metrics.json is not valid JSON"),
    "metrics-truncated": (truncate("metrics.json"), "metrics.json is not valid JSON"),
    "metrics-not-utf8": (write("metrics.json", b"\xff\xfe{}"), "metrics.json is not valid JSON"),
    "metrics-array": (write("metrics.json", "[0.1, 0.2]"), "holds a list, not a JSON object"),
    "metrics-null": (write("metrics.json", "null"), "holds nothing, not a JSON object"),
    "metric-string": (metric("test/ndcg@10", "0.5"), "'test/ndcg@10' is \"0.5\", not a finite"),
    "metric-bool": (metric("test/hr@10", True), "'test/hr@10' is true"),
    "metric-null": (metric("val/ndcg@10", None), "'val/ndcg@10' is null"),
    "metric-list": (metric("fit/epochs", [1, 2]), "'fit/epochs' is [1, 2]"),
    "metric-nan": (write("metrics.json", '{"test/ndcg@10": NaN}'), "is NaN, not a finite"),
    "metric-infinite": (write("metrics.json", '{"test/hr@10": Infinity}'), "is Infinity"),
    "metric-huge-int": (
        write("metrics.json", '{"fit/epochs": 1' + "0" * 400 + "}"),
        "'fit/epochs' is 1000",
    ),
    "checkpoint-number": (metric("checkpoint", 3), "'checkpoint' is 3"),
    "metrics-folder": (folder_instead("metrics.json"), "metrics.json cannot be read"),
    "metrics-dangling-link": (dangling("metrics.json"), "metrics.json cannot be read"),
    "config-not-yaml": (
        write(".hydra/config.yaml", "model: [unclosed\n"),
        "config.yaml is not valid",
    ),
    "config-not-utf8": (
        write(".hydra/config.yaml", b"\xff\xfe: x\n"),
        "config.yaml is not valid YAML",
    ),
    "config-list": (
        write(".hydra/config.yaml", "- a\n- b\n"),
        "config.yaml holds a list, not a map",
    ),
    "config-empty": (write(".hydra/config.yaml", ""), "config.yaml holds nothing, not a mapping"),
    "config-scalar": (write(".hydra/config.yaml", "just words\n"), "config.yaml holds a string"),
    "config-python-tag": (
        write(".hydra/config.yaml", f"!!python/object/apply:os.system ['touch {MARKER}']\n"),
        "config.yaml is not valid YAML",
    ),
    "config-python-object": (
        write(".hydra/config.yaml", f"model: !!python/object/apply:os.system ['touch {MARKER}']\n"),
        "config.yaml is not valid YAML",
    ),
    "overrides-mapping": (write(".hydra/overrides.yaml", "a: 1\n"), "not a list of strings"),
    "overrides-nested": (write(".hydra/overrides.yaml", "- [a]\n"), "not a list of strings"),
    "overrides-not-yaml": (write(".hydra/overrides.yaml", "[a\n"), "overrides.yaml is not"),
    "hydra-not-yaml": (write(".hydra/hydra.yaml", "hydra: {runtime: [\n"), "hydra.yaml is not"),
    "curve-strings": (
        write("csv/metrics.csv", "epoch,val/ndcg@10\nzero,abc\n"),
        "csv/metrics.csv has a non-numeric",
    ),
    "curve-infinite": (
        write("csv/metrics.csv", "epoch,val/ndcg@10\n0,inf\n"),
        "without an epoch or a finite value",
    ),
    "curve-folder": (folder_instead("csv/metrics.csv"), "csv/metrics.csv cannot be read as CSV"),
}


def hostile_but_readable(run: Path) -> None:
    """A config naming code to call (``_target_`` with arguments, as instantiate would run it)
    and an interpolation: readable plain data, so reported, but nothing in it may run."""
    config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    config["model"] = {"_target_": "builtins.exec", "_args_": [f"open('{MARKER}', 'w').close()"]}
    config["home"] = "${oc.env:HOME}"
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (run / ".hydra" / "hydra.yaml").unlink()  # the model name comes from the config alone


@pytest.fixture(scope="module")
def mixed_sweep(good_run, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """Run 0 good, run 1 good but hostile, then every broken variant; reported once."""
    sweep = tmp_path_factory.mktemp("mixed")
    place(good_run, sweep / "0")
    hostile_but_readable(place(good_run, sweep / "1"))
    for name, (corrupt, _) in BROKEN.items():
        corrupt(place(good_run, sweep / name))
    return sweep, run_command(BIN / "recsys-report", f"folder={sweep}", DEBUG, cwd=sweep)


def test_readable_runs_are_reported_and_the_rest_skipped(mixed_sweep):
    sweep, result = mixed_sweep
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "2 runs." in result.stdout
    frame = pl.read_csv(sweep / "report" / "report.csv", schema_overrides={"run": pl.String})
    assert frame["run"].to_list() == ["0", "1"]
    assert frame["model"].to_list() == ["sasrec", "exec"]  # the target is read, as a name
    assert frame["test/ndcg@10"].is_between(0, 1).all()
    for plot in ("metrics.png", "val_curves.png", "length_histogram_demo.png"):
        assert (sweep / "report" / plot).stat().st_size > 1000
    warnings = [line for line in result.stderr.splitlines() if line.startswith(WARNING)]
    assert len(warnings) == len(BROKEN)


@pytest.mark.parametrize("name", list(BROKEN))
def test_each_broken_run_gets_one_warning_line_with_its_reason(mixed_sweep, name):
    sweep, result = mixed_sweep
    lines = [line for line in result.stderr.splitlines() if f"{sweep / name}:" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{WARNING}{sweep / name}: ")
    assert BROKEN[name][1] in lines[0]


def test_nothing_named_by_a_file_is_called(mixed_sweep):
    sweep, _ = mixed_sweep
    assert not list(sweep.rglob(MARKER))
    assert not (sweep / MARKER).exists() and not Path(MARKER).exists()


def test_nothing_readable_left_is_one_error_and_exit_2(good_run, tmp_path):
    sweep = tmp_path / "sweep"
    for name in ("metrics-not-json", "config-python-tag", "metric-string"):
        BROKEN[name][0](place(good_run, sweep / name))
    result = run_command(BIN / "recsys-report", f"folder={sweep}", DEBUG, cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith(WARNING) for line in lines[:3])
    assert lines[3].startswith("recsys-report: error: none of the 3 run folders")
    assert not (sweep / "report").exists()
    assert not list(tmp_path.rglob(MARKER))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_an_unreadable_metrics_file_is_skipped(good_run, tmp_path):
    place(good_run, tmp_path / "sweep" / "0")
    (place(good_run, tmp_path / "sweep" / "1") / "metrics.json").chmod(0)
    result = run_command(BIN / "recsys-report", f"folder={tmp_path / 'sweep'}", DEBUG, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"{WARNING}{tmp_path / 'sweep' / '1'}: metrics.json cannot be read" in result.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (["folder=missing-folder"], "recsys-report: error: folder=missing-folder is not a folder"),
        (["folder=empty"], "recsys-report: error: no run folders under empty"),
        ([], "recsys-report: error: folder is required: recsys-report folder=<"),
        (["empty"], "recsys-report: error: give the folder as folder=empty."),
        (["folder=empty", "colour=red"], "recsys-report: error: Unknown option(s) colour"),
        (["folder=empty", "include_debug=maybe"], "recsys-report: error: include_debug"),
    ],
    ids=["missing", "empty", "no-folder", "positional", "unknown-option", "not-a-bool"],
)
def test_usage_and_folder_errors_exit_2(tmp_path, args, expected):
    (tmp_path / "empty").mkdir()
    result = run_command(BIN / "recsys-report", *args, cwd=tmp_path)
    assert result.returncode == 2
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # no outputs/, no log


def test_the_command_writes_only_its_report(good_run, tmp_path):
    """A Hydra app, but no run folder, .hydra/ or log file: only <folder>/report/."""
    place(good_run, tmp_path / "sweep" / "0")
    (tmp_path / "cwd").mkdir()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = run_command(
        BIN / "recsys-report", f"folder={tmp_path / 'sweep'}", DEBUG, cwd=tmp_path / "cwd"
    )
    assert result.returncode == 0, result.stderr
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    new = {p.parts[:3] for p in after if p not in before}
    assert new == {("sweep", "report")} | {("sweep", "report", n) for n in REPORT_FILES}
    assert list((tmp_path / "cwd").iterdir()) == []


def test_debug_runs_are_left_out_unless_asked(good_run, tmp_path):
    place(good_run, tmp_path / "sweep" / "0")
    result = run_command(BIN / "recsys-report", f"folder={tmp_path / 'sweep'}", cwd=tmp_path)
    assert result.returncode == 2
    assert "all 1 runs under" in result.stderr
    assert "trainer.limit_train_batches=2); include_debug=true reports them" in result.stderr
    assert not (tmp_path / "sweep" / "report").exists()
