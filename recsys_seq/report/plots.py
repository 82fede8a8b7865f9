"""The report's images: test metrics per run, the monitored validation curve per run, and
each dataset's length histogram copied from its prepared folder.

Files only (matplotlib's Agg backend, no display). Labels come from the runs' files, so the
caller draws with mathtext off (``text.parse_math``), as :func:`recsys_seq.cli.report.report`
does.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed

import matplotlib.pyplot as plt  # noqa: E402

from data_prep import schema  # noqa: E402
from recsys_seq.report.runs import DEFAULT_MONITOR, Run  # noqa: E402

BAR_METRICS = ("test/ndcg@10", "test/hr@10")


def _wrap(label: str, width: int = 22) -> str:
    return "\n".join(textwrap.wrap(label, width, break_long_words=True)) or label


def plot_metrics(runs: Sequence[Run], path: Path) -> Path | None:
    """Grouped bars of :data:`BAR_METRICS` per run, one panel per dataset; popularity's values
    as dashed reference lines in the same colours."""
    runs = [r for r in runs if any(m in r.metrics for m in BAR_METRICS)]
    if not runs:
        return None
    datasets = list(dict.fromkeys(r.dataset for r in runs))
    widths = [max(2, len([r for r in runs if r.dataset == d])) for d in datasets]
    fig, axes = plt.subplots(
        1,
        len(datasets),
        figsize=(max(6.0, 1.3 * sum(widths) + 2.5), 4.8),
        sharey=True,
        squeeze=False,
        gridspec_kw={"width_ratios": widths},
    )
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    bar = 0.8 / len(BAR_METRICS)
    top = 0.0
    for ax, dataset in zip(axes[0], datasets, strict=True):
        group = [r for r in runs if r.dataset == dataset]
        for j, metric in enumerate(BAR_METRICS):
            values = [float(r.metrics.get(metric) or 0.0) for r in group]
            xs = [i + (j - (len(BAR_METRICS) - 1) / 2) * bar for i in range(len(group))]
            bars = ax.bar(xs, values, bar, color=colours[j], label=metric)
            ax.bar_label(bars, fmt="%.3f", fontsize=8, padding=2)
            top = max(top, *values)
            reference = [r.metrics.get(f"popularity/{metric}") for r in group]
            reference = [float(v) for v in reference if v is not None]
            if reference:
                value = sum(reference) / len(reference)
                ax.axhline(
                    value,
                    color=colours[j],
                    linestyle="--",
                    linewidth=1.2,
                    label=f"popularity {metric} ({value:.3f})",
                )
                top = max(top, value)
        ax.set_xticks(range(len(group)), [_wrap(r.label) for r in group], fontsize=8)
        ax.set_xlim(-0.6, len(group) - 0.4)
        ax.set_title(f"dataset: {dataset}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", framealpha=0.9)
    axes[0][0].set_ylabel("test metric (all-item ranking)")
    axes[0][0].set_ylim(0, max(top * 1.35, 1e-3))  # room for the labels and the legend
    fig.suptitle("Test NDCG@10 and HR@10 per run (dashed: popularity baseline)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_curves(runs: Sequence[Run], path: Path) -> Path | None:
    """The monitored validation metric per epoch, one line per run."""
    runs = [r for r in runs if r.curve is not None and r.curve.height]
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.2 + 0.25 * len(runs)))
    markers = "osD^vP*X"
    styles = ("-", "--", "-.", ":")
    for i, r in enumerate(runs):
        # distinct markers and dashes (hollow on every other run): runs with identical
        # early epochs (same seed, different max_epochs) stay visible on top of each other
        ax.plot(
            r.curve["epoch"],
            r.curve["value"],
            marker=markers[i % len(markers)],
            linestyle=styles[i % len(styles)],
            markersize=9 if i % 2 == 0 else 6,
            markerfacecolor="none" if i % 2 == 0 else None,
            label=f"{r.label} [{r.dataset}]"
            + ("" if r.monitor == DEFAULT_MONITOR else f" ({r.monitor})"),
        )
    epochs = sorted({int(e) for r in runs for e in r.curve["epoch"]})
    if len(epochs) <= 20:
        ax.set_xticks(epochs)
    ax.set_xlabel("epoch")
    monitors = sorted({r.monitor for r in runs})
    shown = monitors[0] if len(monitors) == 1 else "monitored metric"
    ax.set_ylabel(f"val/{shown}")
    ax.set_title(f"Validation {shown} over epochs (one line per run)")
    ax.grid(alpha=0.3)
    ax.legend(
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=1 if len(runs) < 6 else 2,
        frameon=False,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


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
