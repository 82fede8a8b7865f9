"""recsys-report: one table and a few plots across the runs under a folder.

    recsys-report outputs/train/multiruns/<date>_<time>     # a sweep
    recsys-report outputs/train/runs/<date>_<time>          # one run
    recsys-report outputs/train                             # everything below it

A run folder is any folder holding ``metrics.json`` and ``config.yaml`` (what recsys-train and
recsys-eval write); a sweep folder holds numbered run folders, each with the Hydra overrides
that made it in ``.hydra/overrides.yaml``. Writes, next to the runs:

* ``report.csv``: one row per run: folder, model, dataset, overrides, every metric.
* ``report/report.md``: the same table as markdown (also printed), key metrics only.
* ``report/metrics.png``: test NDCG@10 and HR@10 of each run, one panel per dataset, the
  popularity baseline as a reference line.
* ``report/val_curves.png``: validation NDCG@10 per epoch (``csv/metrics.csv``), one line per run.
* ``report/length_histogram_<dataset>.png``: each dataset's length histogram, copied from the
  prepared dataset folder (``data.path``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed

import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from data_prep import schema  # noqa: E402
from recsys_seq.cli.runs import CONFIG_FILE, METRICS_FILE  # noqa: E402

REPORT_DIR = "report"
REPORT_CSV = "report.csv"
CURVE_METRIC = "val/ndcg@10"
BAR_METRICS = ("test/ndcg@10", "test/hr@10")
TABLE_METRICS = (
    "test/ndcg@10",
    "test/hr@10",
    "test/mrr@10",
    "val/best_ndcg@10",
    "popularity/test/ndcg@10",
    "popularity/test/hr@10",
    "fit/epochs",
    "fit/seconds",
)
# overrides left out of plot labels (the model is named anyway; the rest is cosmetic)
LABEL_SKIPS = (
    "model=",
    "data.path=",
    "hydra.",
    "callbacks.progress_bar",
    "callbacks.model_summary",
)
# encoder / model class -> the model's config name
MODEL_NAMES = {
    "SelfAttentionEncoder": "sasrec",
    "GRUEncoder": "gru",
    "TargetAttention": "din",
    "TargetAttentionRecommender": "din",
}


@dataclass
class Run:
    """One run folder: where it is, how it was made and what it measured."""

    path: Path
    name: str
    model: str
    dataset: str
    data_path: Path | None
    overrides: list[str]
    metrics: dict[str, float | str | None]
    curve: pl.DataFrame | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        """Short plot label: the model, then the overrides that are not the model choice."""
        extra = [o for o in self.overrides if not o.startswith(LABEL_SKIPS)]
        return " ".join([self.model, *extra]) if extra else f"{self.model} ({self.name})"


def load_yaml(path: Path) -> object:
    """A YAML file as plain Python (interpolations left as written)."""
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def find_runs(folder: Path) -> list[Path]:
    """Every folder at or below ``folder`` that holds metrics.json and config.yaml, sorted
    (numbered sweep folders in numeric order)."""
    found = {p.parent for p in folder.rglob(METRICS_FILE) if (p.parent / CONFIG_FILE).is_file()}

    def key(path: Path) -> tuple:
        return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.parts)

    return sorted(found, key=key)


def model_name(config: dict, run: Path) -> str:
    hydra_file = run / ".hydra" / "hydra.yaml"
    if hydra_file.is_file():
        choices = (load_yaml(hydra_file) or {}).get("hydra", {})
        choice = choices.get("runtime", {}).get("choices", {}).get("model")
        if choice:
            return choice
    model = config.get("model") or {}
    for target in ((model.get("encoder") or {}).get("_target_"), model.get("_target_")):
        if target:
            cls = target.rsplit(".", 1)[-1]
            return MODEL_NAMES.get(cls, cls)
    return "?"


def resolve_data_path(path: str | None, run: Path) -> Path | None:
    """``data.path`` as written (relative to where the run started: tried against the current
    folder, then each folder above the run)."""
    if not path:
        return None
    candidate = Path(path)
    if candidate.is_absolute():
        return candidate if candidate.is_dir() else None
    for base in (Path.cwd(), *run.resolve().parents):
        if (base / candidate).is_dir():
            return base / candidate
    return None


def read_curve(run: Path) -> pl.DataFrame | None:
    """``epoch, val/ndcg@10`` rows of the run's CSV log (``csv/metrics.csv``), if any."""
    files = sorted((run / "csv").rglob("metrics.csv")) if (run / "csv").is_dir() else []
    if not files:
        return None
    frame = pl.read_csv(files[-1], infer_schema_length=None)
    if CURVE_METRIC not in frame.columns or "epoch" not in frame.columns:
        return None
    return (
        frame.select("epoch", CURVE_METRIC)
        .filter(pl.col(CURVE_METRIC).is_not_null())
        .group_by("epoch")
        .agg(pl.col(CURVE_METRIC).last())  # one value per epoch (resumed runs log twice)
        .sort("epoch")
    )


def load_run(run: Path, root: Path) -> Run:
    config = load_yaml(run / CONFIG_FILE) or {}
    overrides_file = run / ".hydra" / "overrides.yaml"
    overrides = load_yaml(overrides_file) if overrides_file.is_file() else []
    data_path = (config.get("data") or {}).get("path")
    relative = run.resolve().relative_to(root.resolve())
    return Run(
        path=run,
        name=str(relative) if str(relative) != "." else run.name,
        model=model_name(config, run),
        dataset=Path(data_path).name if data_path else "?",
        data_path=resolve_data_path(data_path, run),
        overrides=list(overrides or []),
        metrics=json.loads((run / METRICS_FILE).read_text()),
        curve=read_curve(run),
    )


def table(runs: Sequence[Run]) -> pl.DataFrame:
    """One row per run: folder, model, dataset, overrides, then every metric (sorted keys)."""
    keys = sorted({k for r in runs for k, v in r.metrics.items() if isinstance(v, int | float)})
    rows = [
        {
            "run": r.name,
            "model": r.model,
            "dataset": r.dataset,
            "overrides": " ".join(r.overrides),
            **{k: float(r.metrics[k]) if r.metrics.get(k) is not None else None for k in keys},
            "checkpoint": r.metrics.get("checkpoint"),
        }
        for r in runs
    ]
    schema_ = {"run": pl.String, "model": pl.String, "dataset": pl.String, "overrides": pl.String}
    schema_ |= {k: pl.Float64 for k in keys} | {"checkpoint": pl.String}
    return pl.DataFrame(rows, schema=schema_)


def markdown(frame: pl.DataFrame) -> str:
    """The key columns of :func:`table` as a markdown pipe table."""
    columns = ["run", "model", "dataset", "overrides"] + [
        m for m in TABLE_METRICS if m in frame.columns
    ]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in frame.select(columns).iter_rows():
        cells = [
            f"{v:.4f}" if isinstance(v, float) else ("-" if v in (None, "") else str(v))
            for v in row
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
    """Validation NDCG@10 per epoch, one line per run."""
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
            r.curve[CURVE_METRIC],
            marker=markers[i % len(markers)],
            linestyle=styles[i % len(styles)],
            markersize=9 if i % 2 == 0 else 6,
            markerfacecolor="none" if i % 2 == 0 else None,
            label=f"{r.label} [{r.dataset}]",
        )
    epochs = sorted({int(e) for r in runs for e in r.curve["epoch"]})
    if len(epochs) <= 20:
        ax.set_xticks(epochs)
    ax.set_xlabel("epoch")
    ax.set_ylabel(CURVE_METRIC)
    ax.set_title("Validation NDCG@10 over epochs (one line per run)")
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
        target = folder / f"length_histogram_{dataset}.png"
        shutil.copyfile(source, target)
        copied.append(target)
    return copied


def report(folder: str | Path) -> dict[str, object]:
    """Build the table and plots for the runs under ``folder``; returns what was written."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder")
    paths = find_runs(folder)
    if not paths:
        raise FileNotFoundError(
            f"no run folders under {folder} (a run folder holds {METRICS_FILE} and {CONFIG_FILE})"
        )
    runs = [load_run(p, folder) for p in paths]
    frame = table(runs)
    out = folder / REPORT_DIR
    out.mkdir(exist_ok=True)
    frame.write_csv(folder / REPORT_CSV)
    text = markdown(frame)
    (out / "report.md").write_text(text + "\n")
    plots = [
        plot_metrics(runs, out / "metrics.png"),
        plot_curves(runs, out / "val_curves.png"),
        *copy_histograms(runs, out),
    ]
    return {
        "runs": runs,
        "table": frame,
        "markdown": text,
        "csv": folder / REPORT_CSV,
        "plots": [p for p in plots if p is not None],
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="recsys-report", description="Table and plots across the runs under a folder."
    )
    parser.add_argument("folder", type=Path, help="a run folder, a sweep folder, or any parent")
    args = parser.parse_args(argv)
    try:
        result = report(args.folder)
    except FileNotFoundError as error:
        raise SystemExit(f"recsys-report: {error}") from None
    print(result["markdown"])
    print(f"\n{len(result['runs'])} runs. Table: {result['csv']}")
    for plot in result["plots"]:
        print(f"Plot: {plot}")


if __name__ == "__main__":
    main()
