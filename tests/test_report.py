"""recsys-report over a tiny two-run sweep made with the real train()."""

import shutil
from pathlib import Path

import polars as pl
import pytest
from omegaconf import OmegaConf

from recsys_seq.cli.report import report
from recsys_seq.report.runs import ReportError
from recsys_seq.report.table import markdown
from recsys_seq.workflows.evaluate import evaluate, record
from recsys_seq.workflows.train import train
from tests.helpers import compose_config, train_config

pytestmark = pytest.mark.slow  # trains two runs of 2 epochs

SWEEP = {"0": ["model=sasrec"], "1": ["model=gru", "model.embedding_dim=32"]}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, demo_dir) -> Path:
    """A sweep folder like Hydra's: numbered runs with ``.hydra/overrides.yaml``."""
    folder = tmp_path_factory.mktemp("multirun")
    for number, overrides in SWEEP.items():
        run_dir = folder / number
        cfg = train_config(
            run_dir,
            demo_dir,
            "trainer.max_epochs=2",
            "trainer.limit_train_batches=3",
            "trainer.limit_val_batches=2",
            "trainer.limit_test_batches=2",
            "callbacks.early_stopping=null",
            *overrides,
        )
        train(cfg)
        (run_dir / ".hydra").mkdir()
        OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")  # unresolved, as Hydra saves it
        (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return folder


def cells(line: str) -> list[str]:
    """A markdown table row's cells, without their padding."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_report_table_and_plots(sweep):
    result = report(sweep, include_debug=True)  # limit_*_batches: debug runs
    assert cells(result["markdown"].splitlines()[0])[:4] == ["run", "model", "dataset", "overrides"]
    assert [r.debug for r in result["runs"]] == ["trainer.limit_train_batches=3"] * 2

    frame = pl.read_csv(sweep / "report" / "report.csv", schema_overrides={"run": pl.String})
    assert frame["run"].to_list() == ["0", "1"]
    assert frame["model"].to_list() == ["sasrec", "gru"]
    assert frame["dataset"].to_list() == ["demo", "demo"]
    assert frame["overrides"].to_list() == [" ".join(o) for o in SWEEP.values()]
    for key in ("test/ndcg@10", "test/hr@10", "val/best_ndcg@10", "popularity/test/ndcg@10"):
        assert frame[key].is_between(0, 1).all(), key
    assert (frame["fit/seconds"] > 0).all() and (frame["fit/epochs"] >= 1).all()

    plots = sweep / "report"
    for name in ("metrics.png", "val_curves.png", "length_histogram_demo.png", "report.md"):
        assert (plots / name).stat().st_size > 1000 or name.endswith(".md"), name


def test_curves_have_one_point_per_epoch(sweep):
    result = report(sweep, include_debug=True)
    for run in result["runs"]:
        assert run.metric == "val/ndcg@10"  # optimized_metric in conf/train.yaml
        assert run.curve_source == "csv"
        assert run.curve["epoch"].to_list() == [0, 1]
        assert run.curve["value"].is_between(0, 1).all()


def test_a_single_run_folder_an_empty_folder_and_debug_runs(sweep, tmp_path):
    result = report(sweep / "1", include_debug=True)
    assert result["table"]["model"].to_list() == ["gru"]
    with pytest.raises(ReportError, match="no run folders"):
        report(tmp_path)
    with pytest.raises(ReportError, match="all 2 runs .* are debug runs"):
        report(sweep)


def evaluated(folder: Path, checkpoint: Path) -> Path:
    """An evaluation's run folder as recsys-eval leaves it (its config names no model)."""
    cfg = compose_config("eval", folder, [f"ckpt_path={checkpoint}", "baselines=false"])
    record(cfg, *evaluate(cfg))
    (folder / ".hydra").mkdir()
    OmegaConf.save(cfg, folder / ".hydra" / "config.yaml")
    return folder


def test_an_evaluation_is_named_by_its_checkpoints_training_run(sweep, tmp_path):
    """recsys-eval's config names no model, data or optimised metric: the checkpoint's run
    folder does, when it is one of the project's run folders."""
    trained = tmp_path / "trained"
    shutil.copytree(sweep / "1", trained)
    config = trained / ".hydra" / "config.yaml"
    config.write_text(config.read_text() + "optimized_metric: val/hr@10\n")
    evaluated(tmp_path / "evals" / "in_run", trained / "checkpoints" / "best.ckpt")
    moved = tmp_path / "elsewhere" / "best.ckpt"  # a checkpoint outside any run folder
    moved.parent.mkdir()
    moved.write_bytes((trained / "checkpoints" / "best.ckpt").read_bytes())
    evaluated(tmp_path / "evals" / "moved", moved)
    posing = tmp_path / "posing"  # a "checkpoints" folder in a folder no run marked
    (posing / "checkpoints").mkdir(parents=True)
    (posing / ".hydra").mkdir()
    (posing / ".hydra" / "config.yaml").write_text("model: {name: not-a-model}\n")
    (posing / "checkpoints" / "best.ckpt").write_bytes(moved.read_bytes())
    evaluated(tmp_path / "evals" / "posing", posing / "checkpoints" / "best.ckpt")

    result = report(tmp_path / "evals", include_debug=True)
    rows = {run.name: (run.model, run.dataset, run.metric) for run in result["runs"]}
    assert rows == {
        "in_run": ("gru", "demo", "val/hr@10"),
        "moved": ("?", "?", "val/ndcg@10"),
        "posing": ("?", "?", "val/ndcg@10"),
    }

    config.write_text("- not a mapping\n")  # the training run's config unreadable: unnamed
    again = report(tmp_path / "evals" / "in_run", include_debug=True)
    assert again["table"]["model"].to_list() == ["?"]


def test_an_evaluation_of_a_debug_runs_checkpoint_is_a_debug_run(sweep, tmp_path):
    """A checkpoint trained on a few batches makes its evaluation's figures a debug run's too:
    left out of a report unless asked for, and named by the training run's reason."""
    debug_trained = tmp_path / "trained"  # the sweep trains on 3 batches an epoch
    shutil.copytree(sweep / "1", debug_trained)
    evaluated(tmp_path / "evals" / "of_debug", debug_trained / "checkpoints" / "best.ckpt")
    with pytest.raises(ReportError, match="its checkpoint's training run: trainer.limit_"):
        report(tmp_path / "evals")

    config = debug_trained / ".hydra" / "config.yaml"  # the same run, as a real one
    real = OmegaConf.load(config)
    for limit in ("limit_train_batches", "limit_val_batches", "limit_test_batches"):
        real.trainer[limit] = None
    OmegaConf.save(real, config)
    (debug_trained / ".hydra" / "overrides.yaml").write_text("[]\n")
    result = report(tmp_path / "evals")
    assert [(run.name, run.model, run.debug) for run in result["runs"]] == [
        ("of_debug", "gru", None)
    ]


def test_markdown_shows_each_runs_optimized_metric_and_its_best_value():
    frame = pl.DataFrame(
        {
            "run": ["a", "b"],
            "model": ["sasrec", "gru"],
            "dataset": ["demo", "demo"],
            "overrides": ["", "optimized_metric=val/hr@5"],
            "optimized_metric": ["val/ndcg@10", "val/hr@5"],
            "debug": [None, None],
            "best_val": [0.5, 0.7],
            "test/ndcg@10": [0.4, 0.3],
            "test/hr@10": [0.6, 0.5],
            "test/hr@5": [0.45, 0.35],
            "test/mrr@10": [0.2, 0.1],
            "popularity/test/ndcg@10": [0.01, 0.01],
        }
    )
    header, _, first, second = (cells(line) for line in markdown(frame).splitlines())
    assert header[4:11] == [
        "test/ndcg@10",
        "test/hr@5",
        "test/hr@10",
        "optimized_metric",
        "best_val",
        "popularity/test/ndcg@10",
        "test/ndcg@10 vs popularity",
    ]
    assert first[4:11] == [
        "0.4000",
        "0.4500",
        "0.6000",
        "val/ndcg@10",
        "0.5000",
        "0.0100",
        "40.00x",
    ]
    assert second[4:11] == ["0.3000", "0.3500", "0.5000", "val/hr@5", "0.7000", "0.0100", "30.00x"]
