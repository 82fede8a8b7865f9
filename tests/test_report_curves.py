"""Validation curves from each logger's files (CSV, TensorBoard, MLflow's file store) and
debug runs left out of a report, over run folders written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from recsys_seq.report import curves, interpolation
from recsys_seq.report.debug import debug_reason
from recsys_seq.report.runs import ReportError, load_runs
from tests.helpers import write_run

RUN_ID = "0f3c9a"


def write_mlflow(store: Path, run_dir: str, values: list[float], run_id: str = RUN_ID) -> Path:
    """An MLflow file store run as MLflow writes it: tags/<name>, metrics/<name> lines of
    ``timestamp value step``; each validation logged at the last step of its epoch, with
    ``epoch`` logged at every step (train/loss rows too)."""
    run = store / "123" / run_id
    metric = "val/ndcg10"  # val/ndcg@10 as MLflow stores it
    (run / "tags").mkdir(parents=True)
    (run / "tags" / "run_dir").write_text(run_dir)
    (run / "metrics" / metric).parent.mkdir(parents=True, exist_ok=True)
    steps = [10 * (e + 1) - 1 for e in range(len(values))]
    (run / "metrics" / metric).write_text(
        "".join(f"{1000 + s} {v} {s}\n" for s, v in zip(steps, values, strict=True))
    )
    (run / "metrics" / "epoch").write_text(
        "".join(f"{1000 + s} {float(s // 10)} {s}\n" for s in range(steps[-1] + 1))
    )
    return run


def mlflow_run(tmp_path: Path, tracking_uri: str = "file:./mlruns") -> Path:
    return write_run(
        tmp_path / "runs" / "0",
        ["model=gru", "logger=mlflow"],
        config={"logger": {"mlflow": {"tracking_uri": tracking_uri}}},
        curve=None,
    )


def test_mlflow_curve_found_by_the_run_dir_tag(tmp_path, monkeypatch):
    run = mlflow_run(tmp_path)
    write_mlflow(tmp_path / "mlruns", str(run.resolve()), [0.1, 0.2, 0.25])
    write_mlflow(tmp_path / "mlruns", "/elsewhere", [0.9], run_id="ffff")  # another run's
    monkeypatch.chdir(tmp_path)  # file:./mlruns is relative to where the run started
    (loaded,) = load_runs(tmp_path / "runs")
    assert loaded.curve_source == "mlflow"
    assert loaded.curve.to_dicts() == [
        {"epoch": 0, "value": 0.1},
        {"epoch": 1, "value": 0.2},
        {"epoch": 2, "value": 0.25},
    ]


def test_mlflow_store_relative_to_the_runs_start_folder(tmp_path, monkeypatch):
    run = mlflow_run(tmp_path)
    (run / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  runtime:\n    cwd: {tmp_path}\n")
    write_mlflow(tmp_path / "mlruns", str(run.resolve()), [0.3])
    monkeypatch.chdir(run)
    assert load_runs(tmp_path / "runs")[0].curve["value"].to_list() == [0.3]


def test_mlflow_server_or_missing_store_is_one_warning(tmp_path, capsys):
    mlflow_run(tmp_path, "http://tracking:5000")
    (loaded,) = load_runs(tmp_path / "runs")
    assert loaded.curve is None
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"recsys-report: warning: no validation curve for 1 run(s) (e.g. {loaded.path}): it "
        "logged to MLflow at http://tracking:5000, which is not a file store"
    ]


def test_a_broken_mlflow_metric_file_skips_the_run(tmp_path, monkeypatch, capsys):
    run = mlflow_run(tmp_path)
    stored = write_mlflow(tmp_path / "mlruns", str(run.resolve()), [0.1])
    (stored / "metrics" / "val" / "ndcg10").write_text("1000 zero 9\n")
    write_run(tmp_path / "runs" / "1", ["model=sasrec"])
    monkeypatch.chdir(tmp_path)
    assert [r.name for r in load_runs(tmp_path / "runs")] == ["1"]
    assert "val/ndcg10 in the MLflow store" in capsys.readouterr().err


def test_tensorboard_curve_with_the_tensorboard_reader(tmp_path):
    from torch.utils.tensorboard import SummaryWriter  # tensorboard: a dev dependency

    run = write_run(tmp_path / "0", ["model=gru", "logger=tensorboard"], curve=None)
    writer = SummaryWriter(run / "tensorboard")  # what Lightning's TensorBoardLogger uses
    for epoch, value in enumerate([0.05, 0.07]):
        step = 10 * (epoch + 1) - 1
        writer.add_scalar("train/loss", 3.0, step - 5)
        writer.add_scalar("epoch", epoch, step - 5)
        writer.add_scalar("val/ndcg@10", value, step)
        writer.add_scalar("epoch", epoch, step)
    writer.close()
    (loaded,) = load_runs(tmp_path)
    assert loaded.curve_source == "tensorboard"
    assert loaded.curve["epoch"].to_list() == [0, 1]
    assert loaded.curve["value"].to_list() == pytest.approx([0.05, 0.07])


def test_tensorboard_not_installed_is_one_clear_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(curves, "tensorboard_installed", lambda: False)
    for name in ("0", "1"):
        run = write_run(tmp_path / name, ["model=gru", "logger=tensorboard"], curve=None)
        (run / "tensorboard").mkdir()
        (run / "tensorboard" / "events.out.tfevents.1.host.1.0").write_bytes(b"\0" * 8)
    assert [r.curve for r in load_runs(tmp_path)] == [None, None]
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("recsys-report: warning: no validation curve for 2 run(s)")
    assert "logged to TensorBoard, and the tensorboard package" in line
    assert "pip install tensorboard" in line


def test_csv_comes_first_and_a_run_without_logs_has_no_curve(tmp_path, capsys):
    write_run(tmp_path / "0", ["model=gru"], curve=[0.2])
    write_run(tmp_path / "1", ["model=gru"], curve=None)
    first, second = load_runs(tmp_path)
    assert first.curve_source == "csv" and second.curve is None
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "overrides, trainer, choice, reason",
    [
        (["debug=fast"], {}, "fast", "debug=fast"),
        (["+debug=fast"], {}, None, "debug=fast"),
        (["debug=null"], {}, None, None),
        ([], {}, "fast", "debug=fast"),
        ([], {"fast_dev_run": True}, None, "trainer.fast_dev_run=true"),
        ([], {"fast_dev_run": 3}, None, "trainer.fast_dev_run=3"),
        ([], {"fast_dev_run": False, "limit_val_batches": None}, None, None),
        ([], {"limit_train_batches": 1.0}, None, None),  # the float 1.0: every batch
        ([], {"limit_train_batches": 1}, None, "trainer.limit_train_batches=1"),  # one batch
        ([], {"limit_test_batches": 0.25}, None, "trainer.limit_test_batches=0.25"),
        ([], {"overfit_batches": 2}, None, "trainer.overfit_batches=2"),
        ([], {"overfit_batches": 0.0}, None, None),
    ],
)
def test_debug_reason(overrides, trainer, choice, reason):
    assert debug_reason({"trainer": trainer}, overrides, choice) == reason


def test_debug_runs_are_left_out_unless_included(tmp_path, capsys):
    write_run(tmp_path / "0", ["model=gru"])
    write_run(tmp_path / "1", ["debug=fast", "model=gru"])
    write_run(tmp_path / "2", ["model=gru"], config={"trainer": {"limit_val_batches": 2}})
    assert [r.name for r in load_runs(tmp_path)] == ["0"]
    assert capsys.readouterr().err.strip() == (
        f"recsys-report: left out 2 debug run(s) (e.g. {tmp_path / '1'}: debug=fast); "
        "include_debug=true reports them."
    )
    runs = load_runs(tmp_path, include_debug=True)
    assert [r.debug for r in runs] == [None, "debug=fast", "trainer.limit_val_batches=2"]
    for name in ("0", "2"):
        (tmp_path / name / "metrics.json").unlink()
    with pytest.raises(ReportError, match="all 1 runs under .* include_debug=true"):
        load_runs(tmp_path)


def test_hydra_config_references_are_filled_in_as_plain_data(tmp_path):
    run = write_run(tmp_path / "0", ["model=gru"])
    (run / "config.yaml").rename(run / ".hydra" / "config.yaml")  # what runs keep now
    (run / ".hydra" / "config.yaml").write_text(
        "paths:\n  root_dir: /r\n  data_dir: ${paths.root_dir}/data\n"
        "  output_dir: ${hydra:runtime.output_dir}\n"
        "data:\n  path: null\n  source: lastfm\n  cache_dir: ${paths.data_dir}/prepared\n"
        "model:\n  name: gru\n  secret: ${oc.env:HOME}\n  called: ${oc.create:x}\n"
        "optimized_metric: val/hr@10\nseed: 7\ntrainer:\n  seed: ${seed}\n"
    )
    (run / ".hydra" / "hydra.yaml").write_text("hydra:\n  runtime:\n    output_dir: /r/o\n")
    (loaded,) = load_runs(tmp_path)
    assert loaded.dataset == "lastfm" and loaded.metric == "val/hr@10"
    config = interpolation.resolve(
        {
            "a": "${b}",
            "b": "${c}/x",
            "c": 3,
            "e": "${oc.env:HOME}",
            "f": "${oc.env:X,dflt}",
            "g": "${hydra:runtime.output_dir}",
            "h": "${h}",
            "i": "${oc.create:1}",
        },
        {"hydra": {"runtime": {"output_dir": "/o"}}},
    )
    assert config == {
        "a": "3/x",
        "b": "3/x",
        "c": 3,
        "e": "${oc.env:HOME}",
        "f": "dflt",
        "g": "/o",
        "h": "${h}",
        "i": "${oc.create:1}",
    }
