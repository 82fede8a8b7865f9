"""recsys-report over a tiny two-run sweep made with the real train()."""

from pathlib import Path

import polars as pl
import pytest

from recsys_seq.cli.report import main, report
from recsys_seq.cli.train import train
from recsys_seq.report.table import markdown
from tests.test_train import demo_dir, train_config  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow  # trains two runs of 2 epochs

SWEEP = {"0": ["model=sasrec"], "1": ["model=gru", "model.embedding_dim=32"]}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, demo_dir) -> Path:  # noqa: F811
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
        (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    return folder


def test_report_table_and_plots(sweep, capsys):
    main([str(sweep)])
    printed = capsys.readouterr().out
    assert "| run | model | dataset | overrides |" in printed and "2 runs" in printed

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
    result = report(sweep)
    for run in result["runs"]:
        assert run.monitor == "ndcg@10"  # model.monitor in conf/model/recommender.yaml
        assert run.curve["epoch"].to_list() == [0, 1]
        assert run.curve["value"].is_between(0, 1).all()


def test_a_single_run_folder_and_an_empty_folder(sweep, tmp_path, capsys):
    result = report(sweep / "1")
    assert result["table"]["model"].to_list() == ["gru"]
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path)])
    assert exit_info.value.code == 2
    assert "recsys-report: error: no run folders" in capsys.readouterr().err


def test_markdown_shows_the_best_value_of_each_monitored_metric():
    frame = pl.DataFrame(
        {
            "run": ["a", "b"],
            "model": ["sasrec", "gru"],
            "dataset": ["demo", "demo"],
            "overrides": ["", "model.monitor=hr@10"],
            "test/ndcg@10": [0.4, 0.3],
            "val/best_ndcg@10": [0.5, None],
            "val/best_hr@10": [None, 0.7],
            "popularity/test/ndcg@10": [0.01, 0.01],
        }
    )
    header, _, first, second = markdown(frame).splitlines()
    assert header.split(" | ")[4:7] == ["test/ndcg@10", "val/best_hr@10", "val/best_ndcg@10"]
    assert "| 0.4000 | - | 0.5000 |" in first and "| 0.3000 | 0.7000 | - |" in second
