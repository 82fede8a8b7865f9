"""The report's images: test metrics per run, the optimised validation metric and the training
loss per epoch, and each dataset's length histogram copied from its prepared folder.

Each figure has one panel per dataset, each with its own y-axis (a small dataset's values are
not flattened by a large one's), the legend to the right of its panel (never over the data
or the reference lines), and run labels that show only what differs between the panel's runs
(:mod:`recsys_seq.report.labels`).

Files only (matplotlib's Agg backend, no display). Labels come from the runs' files, so the
caller draws with mathtext off (``text.parse_math``), as :func:`recsys_seq.cli.report.report`
does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed

import matplotlib.pyplot as plt  # noqa: E402

from data_prep import schema  # noqa: E402
from recsys_seq.report import labels  # noqa: E402
from recsys_seq.report.runs import Run, key_metrics  # noqa: E402

LEGEND = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 8, "frameon": False}
TICK_FONT = 8
INCH_PER_CHAR = 0.075  # of a tick label's longest line at TICK_FONT
LEGEND_WIDTH = 3.2  # inches to the right of each panel


def bar_metrics(runs: Sequence[Run]) -> list[str]:
    """The test metrics to draw for ``runs``: :func:`~recsys_seq.report.runs.key_metrics` of
    their optimised metrics (``test/ndcg@10`` and ``test/hr@10`` for ``val/ndcg@10``), those
    some run has."""
    wanted = key_metrics([r.metric for r in runs])
    return [m for m in wanted if any(m in r.metrics for r in runs)]


def by_dataset(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """The runs of each dataset, datasets in the order their first run comes."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.dataset, []).append(run)
    return groups


def _panel_title(dataset: str, group: Sequence[Run], common: Sequence[str]) -> str:
    own = [o for o in labels.shared(group) if o not in common]
    return "\n".join(filter(None, [f"dataset: {dataset}", labels.caption(own, "its runs")]))


def _title(fig: plt.Figure, title: str, common: Sequence[str]) -> None:
    fig.suptitle(
        "\n".join(filter(None, [title, labels.caption(common, "all runs")])),
        fontsize=10,
    )


def save(fig: plt.Figure | None, path: Path) -> Path | None:
    """Write ``fig`` to ``path`` (nothing without a figure) and free it."""
    if fig is None:
        return None
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_metrics(runs: Sequence[Run], path: Path) -> Path | None:
    """:func:`metrics_figure` written to ``path``; None when no run has a test metric."""
    return save(metrics_figure(runs), path)


def plot_curves(runs: Sequence[Run], path: Path) -> Path | None:
    """:func:`curves_figure` written to ``path``; None when no run has a curve."""
    return save(curves_figure(runs), path)


def metrics_figure(runs: Sequence[Run]) -> plt.Figure | None:
    """Grouped bars of each panel's :func:`bar_metrics` per run, one panel per dataset;
    popularity's values as dashed reference lines in the same colours."""
    runs = [r for r in runs if bar_metrics([r])]
    if not runs:
        return None
    groups = by_dataset(runs)
    common = labels.shared(runs)
    panels = []
    for dataset, group in groups.items():
        known = labels.shared(group)
        panels.append((dataset, group, labels.labels(group, known)))
    slot = max(  # inches per run, the same in every panel: bars keep one width
        max(1.3, INCH_PER_CHAR * max(len(x) for x in t.split("\n")))
        for _, _, ticks in panels
        for t in ticks
    )
    slots = max(len(group) for group in groups.values())
    width = slot * slots
    heights = [3.2 + 0.13 * max(t.count("\n") + 1 for t in ticks) for _, _, ticks in panels]
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(max(5.0, width) + LEGEND_WIDTH, sum(heights) + 1.0),
        squeeze=False,
        layout="constrained",
        gridspec_kw={"height_ratios": heights},
    )
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (dataset, group, ticks) in zip(axes[:, 0], panels, strict=True):
        metrics = bar_metrics(group)
        bar = 0.8 / len(metrics)
        top = 0.0
        for j, metric in enumerate(metrics):
            values = [float(r.metrics.get(metric) or 0.0) for r in group]
            xs = [i + (j - (len(metrics) - 1) / 2) * bar for i in range(len(group))]
            bars = ax.bar(xs, values, bar, color=colours[j % len(colours)], label=metric)
            ax.bar_label(bars, fmt="%.3f", fontsize=7, padding=2)
            top = max(top, *values)
            reference = [r.metrics.get(f"popularity/{metric}") for r in group]
            reference = [float(v) for v in reference if v is not None]
            if reference:
                value = sum(reference) / len(reference)
                ax.axhline(
                    value,
                    color=colours[j % len(colours)],
                    linestyle="--",
                    linewidth=1.2,
                    label=f"popularity {metric} ({value:.3f})",
                )
                top = max(top, value)
        ax.set_xticks(range(len(group)), ticks, fontsize=TICK_FONT)
        ax.set_xlim(-0.6, slots - 0.4)  # a panel of fewer runs leaves its right side empty
        ax.set_ylim(0, max(top * 1.15, 1e-3))  # room for the value labels
        ax.set_ylabel("test metric", fontsize=9)
        ax.set_title(_panel_title(dataset, group, common), fontsize=9, loc="left")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(**LEGEND)
    _title(fig, "Test metrics per run, ranked against all items (dashed: popularity)", common)
    return fig


def curves_figure(runs: Sequence[Run]) -> plt.Figure | None:
    """Per dataset, two panels side by side: the optimised validation metric per epoch (each
    run's best epoch starred, popularity's value dashed) and the mean training loss per epoch,
    one line per run in the same colour and style in both."""
    runs = [r for r in runs if r.curve is not None and r.curve.height]
    if not runs:
        return None
    groups = by_dataset(runs)
    common = labels.shared(runs)
    names = {d: labels.labels(g, labels.shared(g)) for d, g in groups.items()}
    # each row at least as tall as its legend (one line of it ~ 0.16 inch)
    heights = [max(3.4, 0.16 * sum(n.count("\n") + 1.6 for n in names[d])) for d in groups]
    fig, axes = plt.subplots(
        len(groups),
        2,
        figsize=(11.0 + LEGEND_WIDTH, sum(heights) + 0.8),
        squeeze=False,
        layout="constrained",
        gridspec_kw={"height_ratios": heights},
    )
    for (metric_ax, loss_ax), (dataset, group) in zip(axes, groups.items(), strict=True):
        metrics = sorted({r.metric for r in group})
        for i, (run, name) in enumerate(zip(group, names[dataset], strict=True)):
            label = name if len(metrics) == 1 else f"{name}\n({run.metric})"
            line = _curve(metric_ax, run.curve, i, label)
            best = run.curve.row(run.curve["value"].arg_max(), named=True)
            metric_ax.plot(best["epoch"], best["value"], "*", color=line.get_color(), ms=14)
            if run.loss is not None and run.loss.height:
                _curve(loss_ax, run.loss, i, None, color=line.get_color())
        _popularity_lines(metric_ax, group)
        _epoch_axis(metric_ax, group)
        _epoch_axis(loss_ax, group)
        metric_ax.set_ylabel(metrics[0] if len(metrics) == 1 else "optimised metric", fontsize=9)
        metric_ax.set_title(_panel_title(dataset, group, common), fontsize=9, loc="left")
        loss_ax.set_ylabel("training loss (mean of the epoch)", fontsize=9)
        loss_ax.set_title("training loss", fontsize=9, loc="left")
        handles, texts = metric_ax.get_legend_handles_labels()
        loss_ax.legend(handles, texts, **LEGEND)
    _title(fig, "Validation metric each run optimised (*: best epoch) and training loss", common)
    return fig


MARKERS = "osD^vP*X"
STYLES = ("-", "--", "-.", ":")


def _curve(ax: plt.Axes, points, i: int, label: str | None, **style) -> plt.Line2D:
    """Run ``i``'s ``epoch, value`` line; distinct markers and dashes (hollow on every other
    run), so runs with identical early epochs (same seed, different max_epochs) stay visible
    on top of each other."""
    (line,) = ax.plot(
        points["epoch"],
        points["value"],
        marker=MARKERS[i % len(MARKERS)],
        linestyle=STYLES[i % len(STYLES)],
        markersize=9 if i % 2 == 0 else 6,
        markerfacecolor="none" if i % 2 == 0 else None,
        label=label,
        **style,
    )
    return line


def _popularity_lines(ax: plt.Axes, group: Sequence[Run]) -> None:
    """The popularity baseline's value of each optimised metric (its validation figure, as
    the runs wrote it), dashed grey: the floor a model has to clear."""
    for metric in sorted({r.metric for r in group}):
        values = [r.metrics.get(f"popularity/{metric}") for r in group if r.metric == metric]
        values = [float(v) for v in values if isinstance(v, int | float)]
        if values:
            value = sum(values) / len(values)
            ax.axhline(
                value,
                color="grey",
                linestyle="--",
                linewidth=1.2,
                label=f"popularity {metric} ({value:.3f})",
            )


def _epoch_axis(ax: plt.Axes, group: Sequence[Run]) -> None:
    epochs = sorted({int(e) for r in group for e in r.curve["epoch"]})
    if len(epochs) <= 20:
        ax.set_xticks(epochs)
    ax.set_xlabel("epoch", fontsize=9)
    ax.grid(alpha=0.3)


def copy_histograms(runs: Sequence[Run], folder: Path) -> list[Path]:
    """Each dataset's prepared ``length_histogram.png`` copied into the report folder."""
    copied = []
    for dataset, data_path in dict.fromkeys((r.dataset, r.data_path) for r in runs):
        source = data_path / schema.HISTOGRAM_FILE if data_path else None
        if source is None or not source.is_file():
            print(f"no length histogram for dataset {dataset} ({source or 'data.path not found'})")
            continue
        try:
            image = source.read_bytes()  # read whole before writing: never a partial copy
        except OSError as error:
            print(f"no length histogram for dataset {dataset} ({source}: {error.strerror})")
            continue
        target = folder / f"length_histogram_{dataset.replace('/', '_')}.png"
        target.write_bytes(image)
        copied.append(target)
    return copied
