"""recsys-report's figures and labels over run folders written here (no training): one panel
per dataset with its own y-axis, legends outside the data, labels with only what differs."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest

from recsys_seq.report import labels
from recsys_seq.report.plots import curves_figure, metrics_figure
from recsys_seq.report.runs import load_runs
from recsys_seq.report.table import markdown, table
from tests.helpers import write_run

matplotlib.use("Agg")


COMMON = ["trainer.max_epochs=2", "paths.root_dir=/tmp/x", "callbacks.progress_bar=null"]


@pytest.fixture
def two_datasets(tmp_path) -> Path:
    """Four runs on a large-valued dataset, two on a small one (values 100x apart)."""
    sweep = tmp_path / "sweep"
    number = 0
    for model in ("sasrec", "gru"):
        for layers in (1, 2):
            write_run(
                sweep / str(number),
                [*COMMON, f"model={model}", f"model.encoder.num_layers={layers}", "data=demo"],
                scale=0.2 * layers,
            )
            number += 1
    for model in ("sasrec", "gru"):
        write_run(
            sweep / str(number),
            [*COMMON, f"model={model}", "data=lastfm", "data.eval_users=500"],
            dataset="lastfm",
            scale=0.002,
            curve=[0.001, 0.003, 0.002],
        )
        number += 1
    return sweep


def tick_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_xticklabels()]


def test_labels_show_only_what_differs(two_datasets):
    runs = load_runs(two_datasets)
    assert labels.shared(runs) == ["trainer.max_epochs=2"]  # paths./callbacks. are not shown
    demo = [r for r in runs if r.dataset == "demo"]
    assert labels.labels(demo, labels.shared(demo)) == [
        "sasrec\nmodel.encoder.num_layers=1",
        "sasrec\nmodel.encoder.num_layers=2",
        "gru\nmodel.encoder.num_layers=1",
        "gru\nmodel.encoder.num_layers=2",
    ]
    lastfm = [r for r in runs if r.dataset == "lastfm"]
    assert labels.shared(lastfm) == ["trainer.max_epochs=2", "data.eval_users=500"]
    assert labels.labels(lastfm, labels.shared(lastfm)) == ["sasrec", "gru"]


def test_runs_that_look_alike_are_named_by_folder(tmp_path):
    for name in ("a", "b"):
        write_run(tmp_path / name, ["model=gru"])
    runs = load_runs(tmp_path)
    assert labels.labels(runs, []) == ["gru\n(a)", "gru\n(b)"]


def test_caption_wraps_between_overrides_never_inside_one():
    overrides = [f"model.encoder.some_long_option_{i}=value_{i}" for i in range(8)]
    text = labels.caption(overrides, "all runs")
    assert len(text.splitlines()) > 1
    for line in text.splitlines():
        for word in line.removeprefix("all runs: ").split():
            assert word in overrides


def test_metrics_figure_one_panel_per_dataset_with_its_own_axis(two_datasets):
    fig = metrics_figure(load_runs(two_datasets))
    demo, lastfm = fig.axes
    assert demo.get_title(loc="left").splitlines()[0] == "dataset: demo"
    assert lastfm.get_title(loc="left") == (
        "dataset: lastfm\nits runs: data.eval_users=500"  # max_epochs is everyone's
    )
    assert "all runs: trainer.max_epochs=2" in fig._suptitle.get_text()
    assert demo.get_ylim()[1] > 0.5 and lastfm.get_ylim()[1] < 0.01  # not one shared axis
    assert tick_texts(lastfm) == ["sasrec", "gru"]
    assert tick_texts(demo)[3] == "gru\nmodel.encoder.num_layers=2"
    assert not any("trainer.max_epochs" in t for ax in fig.axes for t in tick_texts(ax))
    legend = [t.get_text() for t in demo.get_legend().get_texts()]
    assert legend == [
        "popularity test/ndcg@10 (0.075)",
        "popularity test/hr@10 (0.120)",
        "test/ndcg@10",
        "test/hr@10",
    ]
    assert_legends_outside(fig)


def assert_legends_outside(fig, axes=None) -> None:
    """Each of ``axes`` (all the figure's) has its legend right of its data, inside the image."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in axes or fig.axes:
        box, data = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
        assert box.x0 >= data.x1, "the legend overlaps the data area"
        assert box.x1 <= fig.bbox.x1, "the legend is cut off"


def test_curves_figure_one_row_per_dataset_legend_outside(two_datasets):
    fig = curves_figure(load_runs(two_datasets))
    demo, demo_loss, lastfm, lastfm_loss = fig.axes
    # per run: its curve and its best-epoch star; then popularity's line
    assert len(demo.get_lines()) == 2 * 4 + 1 and len(lastfm.get_lines()) == 2 * 2 + 1
    curve, star = lastfm.get_lines()[:2]
    assert list(curve.get_ydata()) == [0.001, 0.003, 0.002]
    assert (list(star.get_xdata()), list(star.get_ydata())) == ([1], [0.003])
    assert star.get_color() == curve.get_color() and star.get_marker() == "*"
    popularity = lastfm.get_lines()[-1]
    assert list(popularity.get_ydata()) == [pytest.approx(0.002 * 0.25)] * 2
    assert popularity.get_label().startswith("popularity val/ndcg@10")
    assert demo.get_ylim()[0] > 0.04 and lastfm.get_ylim()[1] < 0.01
    assert demo.get_ylabel() == "val/ndcg@10"
    # the mean training loss of each epoch, in its run's colour
    assert len(demo_loss.get_lines()) == 4 and len(lastfm_loss.get_lines()) == 2
    loss = lastfm_loss.get_lines()[0]
    assert list(loss.get_ydata()) == pytest.approx([4.75, 3.75, 2.75])
    assert loss.get_color() == curve.get_color()
    assert demo.get_legend() is None and lastfm.get_legend() is None  # one legend per row
    assert_legends_outside(fig, [demo_loss, lastfm_loss])


def test_bars_and_table_follow_the_optimized_metric(tmp_path):
    write_run(tmp_path / "0", ["model=sasrec"], config={"optimized_metric": "val/mrr@20"})
    write_run(tmp_path / "1", ["model=gru"], config={"optimized_metric": "val/mrr@20"})
    for run in ("0", "1"):  # the metrics recsys-train writes for an mrr@20 run
        metrics = json.loads((tmp_path / run / "metrics.json").read_text())
        metrics |= {"test/mrr@20": 0.3, "popularity/test/mrr@20": 0.01}
        (tmp_path / run / "metrics.json").write_text(json.dumps(metrics))
    runs = load_runs(tmp_path)
    assert [r.metric for r in runs] == ["val/mrr@20", "val/mrr@20"]
    assert runs[0].curve["value"].to_list() == [0.1, 0.15]  # the csv column val/mrr@20
    fig = metrics_figure(runs)
    bars = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert [b for b in bars if not b.startswith("popularity")] == ["test/mrr@20", "test/hr@20"]
    assert curves_figure(runs).axes[0].get_ylabel() == "val/mrr@20"
    header = markdown(table(runs)).splitlines()[0].split(" | ")
    assert header[4:8] == ["test/mrr@20", "test/hr@20", "optimized_metric", "best_val"]
    assert table(runs)["best_val"].to_list() == pytest.approx([0.18, 0.18])


def test_older_runs_name_their_metric_in_model_monitor(tmp_path):
    write_run(tmp_path / "0", ["model=gru"], config={"model": {"name": "gru", "monitor": "hr@5"}})
    write_run(tmp_path / "1", ["model=gru"], config={"model": {"name": "gru"}})
    assert [r.metric for r in load_runs(tmp_path)] == ["val/hr@5", "val/ndcg@10"]


@pytest.mark.parametrize("value", [3, "ndcg@10", None, ["val/ndcg@10"]])
def test_an_optimized_metric_that_is_not_a_val_key_skips_the_run(tmp_path, capsys, value):
    write_run(tmp_path / "good", ["model=gru"])
    write_run(tmp_path / "bad", ["model=gru"], config={"optimized_metric": value})
    assert [r.name for r in load_runs(tmp_path)] == ["good"]
    err = capsys.readouterr().err
    assert f"skipping {tmp_path / 'bad'}: config.yaml: optimized_metric is" in err


def test_mixed_optimized_metrics_in_one_panel_are_named_per_line(tmp_path):
    write_run(tmp_path / "0", ["model=gru"])
    write_run(tmp_path / "1", ["model=gru"], config={"optimized_metric": "val/hr@10"})
    fig = curves_figure(load_runs(tmp_path))
    assert fig.axes[0].get_ylabel() == "optimised metric"
    names = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]  # right of the row
    assert names[:2] == ["gru\n(0)\n(val/ndcg@10)", "gru\n(1)\n(val/hr@10)"]
    assert [n.split(" (")[0] for n in names[2:]] == [
        "popularity val/hr@10",
        "popularity val/ndcg@10",
    ]


def test_no_figure_without_metrics_or_curves(tmp_path):
    write_run(tmp_path / "0", ["model=gru"], curve=None)
    runs = load_runs(tmp_path)
    assert curves_figure(runs) is None
    runs[0].metrics.clear()
    assert metrics_figure(runs) is None
