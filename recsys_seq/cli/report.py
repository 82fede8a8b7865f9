"""recsys-report: one table and a few plots across the runs under a folder.

    recsys-report outputs/train/multiruns/<date>_<time>     # a sweep
    recsys-report outputs/train/runs/<date>_<time>          # one run
    recsys-report outputs/train                             # everything below it

A run folder is any folder holding ``metrics.json`` and ``config.yaml`` (what recsys-train and
recsys-eval write); a sweep folder holds numbered run folders, each with the Hydra overrides
that made it in ``.hydra/overrides.yaml``. Writes one folder ``report/`` next to the runs,
published whole (a re-run replaces it; a ``report`` folder recsys-report did not write is
refused):

* ``report/report.csv``: one row per run: folder, model, dataset, overrides, every metric.
* ``report/report.md``: the same table as markdown (also printed), key metrics only.
* ``report/metrics.png``: test NDCG@10 and HR@10 of each run, one panel per dataset, the
  popularity baseline as a reference line.
* ``report/val_curves.png``: validation NDCG@10 per epoch (``csv/metrics.csv``), one line per run.
* ``report/length_histogram_<dataset>.png``: each dataset's length histogram, copied from the
  prepared dataset folder (``data.path``).

Run folders may come from anyone, so their files are read as plain data only: YAML with
``yaml.safe_load`` (no tags, no objects; interpolations stay unresolved strings), JSON with
``json``; a ``_target_`` in a config is read as a name, never imported or called. A run folder
that cannot be read as a run (a file that is not JSON/YAML, not the expected shape, a metric
that is not a number, a file that cannot be opened) is skipped with one warning line naming it
and the reason, and the rest are reported; with no readable run left, the command stops with
one error paragraph and exit status 2, having written nothing. Everything is read and checked
before the first output is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed

import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402
import yaml  # noqa: E402

from data_prep import schema  # noqa: E402
from data_prep.errors import UserError, exit_on_user_error  # noqa: E402
from data_prep.publish import publishing, register_folder_kind  # noqa: E402
from recsys_seq.cli.runs import CONFIG_FILE, METRICS_FILE  # noqa: E402

REPORT_DIR = "report"
REPORT = "report"  # the artifact kind (data_prep.publish)
register_folder_kind(
    REPORT, r"report\.(csv|md)|metrics\.png|val_curves\.png|length_histogram_.+\.png"
)
REPORT_CSV = "report.csv"
HYDRA_FILE = ".hydra/hydra.yaml"
OVERRIDES_FILE = ".hydra/overrides.yaml"
CHECKPOINT = "checkpoint"  # the one metrics.json entry that is not a number (a path or null)
FLOAT_MAX = sys.float_info.max
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
# encoder / model class of a ``_target_`` (runs made before the model registry) -> model name
MODEL_NAMES = {
    "SelfAttentionEncoder": "sasrec",
    "GRUEncoder": "gru",
    "TargetAttention": "din",
    "TargetAttentionRecommender": "din",
}


class ReportError(UserError):
    """Nothing to report: no such folder, no run folder under it, or none readable."""


class UnreadableRun(Exception):
    """A run folder whose files cannot be read as a run; the report skips it with a warning."""


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


def load_yaml(run: Path, name: str) -> object:
    """The run's YAML file ``name`` as plain data: ``yaml.safe_load`` builds only mappings,
    lists and scalars (a ``!!python/...`` tag is an error, not a call) and leaves ``${...}``
    interpolations as the strings they are."""
    try:
        return yaml.safe_load((run / name).read_text(encoding="utf-8"))
    except OSError as error:
        raise UnreadableRun(f"{name} cannot be read ({error.strerror or error})") from None
    except (yaml.YAMLError, ValueError, RecursionError) as error:  # ValueError: not UTF-8
        raise UnreadableRun(f"{name} is not valid YAML ({_one_line(error)})") from None


def load_metrics(run: Path) -> dict[str, float | str | None]:
    """The run's metrics.json: a JSON object of finite numbers, plus the checkpoint path (or
    null)."""
    try:
        metrics = json.loads((run / METRICS_FILE).read_text(encoding="utf-8"))
    except OSError as error:
        raise UnreadableRun(f"{METRICS_FILE} cannot be read ({error.strerror or error})") from None
    except (ValueError, RecursionError) as error:  # not UTF-8, not JSON
        raise UnreadableRun(f"{METRICS_FILE} is not valid JSON ({_one_line(error)})") from None
    if not isinstance(metrics, dict):
        raise UnreadableRun(f"{METRICS_FILE} holds {_kind(metrics)}, not a JSON object")
    for key, value in metrics.items():
        if key == CHECKPOINT:
            ok = value is None or isinstance(value, str)
        else:  # not bool (an int to Python); finite as a float (NaN fails any comparison):
            # NaN, inf or a 400-digit integer would break the table and the plots
            ok = type(value) in (int, float) and -FLOAT_MAX <= value <= FLOAT_MAX
        if not ok:
            raise UnreadableRun(f"{METRICS_FILE}: {key!r} is {_shown(value)}, not a finite number")
    return metrics


def lookup(data: object, *keys: str) -> str | None:
    """The string at ``data[k1][k2]...``; None where a level is missing or not a mapping, or
    the value is not a string."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, str) else None


def _kind(value: object) -> str:
    kinds = {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}
    return kinds.get(type(value), f"a {type(value).__name__}")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def find_runs(folder: Path) -> list[Path]:
    """Every folder at or below ``folder`` holding entries named metrics.json and config.yaml,
    sorted (numbered sweep folders in numeric order). Names, not files: a run whose metrics.json
    is a dangling link or a folder is found, and then skipped with a warning, not ignored."""
    found = {
        Path(top)
        for top, dirs, files in os.walk(folder)  # symbolic links to folders are not followed
        if {METRICS_FILE, CONFIG_FILE} <= {*dirs, *files}
    }

    def key(path: Path) -> tuple:
        return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.parts)

    return sorted(found, key=key)


def model_name(config: dict, run: Path) -> str:
    """The model's config name: Hydra's choice, else ``model.name``, else the class named by an
    older run's ``_target_`` (only the string is read)."""
    if (run / HYDRA_FILE).exists():
        choice = lookup(load_yaml(run, HYDRA_FILE), "hydra", "runtime", "choices", "model")
        if choice:
            return choice
    name = lookup(config, "model", "name")
    if name:
        return name
    for target in (
        lookup(config, "model", "encoder", "_target_"),
        lookup(config, "model", "_target_"),
    ):
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
    name = files[-1].relative_to(run)
    try:
        frame = pl.read_csv(files[-1], infer_schema_length=None)
    except (OSError, pl.exceptions.PolarsError, pl.exceptions.PanicException) as error:
        raise UnreadableRun(f"{name} cannot be read as CSV ({_one_line(error)})") from None
    if CURVE_METRIC not in frame.columns or "epoch" not in frame.columns:
        return None
    curve = frame.select("epoch", CURVE_METRIC).filter(pl.col(CURVE_METRIC).is_not_null())
    if curve.is_empty():  # validation never logged (an all-empty column reads as strings)
        return None
    if not (curve.schema["epoch"].is_integer() and curve.schema[CURVE_METRIC].is_numeric()):
        raise UnreadableRun(f"{name} has a non-numeric epoch or {CURVE_METRIC} column")
    if curve["epoch"].null_count() or not curve[CURVE_METRIC].cast(pl.Float64).is_finite().all():
        raise UnreadableRun(f"{name} has a {CURVE_METRIC} row without an epoch or a finite value")
    return (
        curve.group_by("epoch")
        .agg(pl.col(CURVE_METRIC).last())  # one value per epoch (resumed runs log twice)
        .sort("epoch")
    )


def load_run(run: Path, root: Path) -> Run:
    """Read one run folder (below ``root``, which names it).

    Raises:
        UnreadableRun: a file of the run cannot be read, or does not hold what runs write.
    """
    metrics = load_metrics(run)
    config = load_yaml(run, CONFIG_FILE)
    if not isinstance(config, dict):
        raise UnreadableRun(f"{CONFIG_FILE} holds {_kind(config)}, not a mapping")
    overrides = (load_yaml(run, OVERRIDES_FILE) if (run / OVERRIDES_FILE).exists() else None) or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise UnreadableRun(f"{OVERRIDES_FILE} is not a list of strings")
    data_path = lookup(config, "data", "path") or _source_path(config)
    relative = run.relative_to(root)
    return Run(
        path=run,
        name=str(relative) if str(relative) != "." else run.name,
        model=model_name(config, run),
        dataset=Path(data_path).name if data_path else "?",
        data_path=resolve_data_path(data_path, run),
        overrides=overrides,
        metrics=metrics,
        curve=read_curve(run),
    )


def _source_path(config: dict) -> str | None:
    """Where ``data=demo`` / ``data=<shared>`` runs read their data: ``cache_dir/source``."""
    cache, source = lookup(config, "data", "cache_dir"), lookup(config, "data", "source")
    if isinstance(cache, str) and isinstance(source, str):
        return str(Path(cache) / source)
    return None


def _distinct_dataset_names(runs: list[Run]) -> list[Run]:
    """Runs on different data folders that share a folder name (``A/p``, ``B/p``) are told
    apart by their parent folder, so no panel, baseline or histogram mixes two datasets."""
    folders: dict[str, set] = {}
    for run in runs:
        folders.setdefault(run.dataset, set()).add(run.data_path)
    return [
        replace(run, dataset=f"{run.data_path.parent.name}/{run.dataset}")
        if len(folders[run.dataset]) > 1 and run.data_path is not None
        else run
        for run in runs
    ]


def load_runs(folder: Path) -> list[Run]:
    """Every readable run folder under ``folder``; each unreadable one is skipped with one
    warning line on stderr.

    Raises:
        ReportError: no folder, no run folder, or no readable one.
    """
    if not folder.is_dir():
        raise ReportError(
            f"{folder} is not a folder; give a run folder, a sweep folder or a parent."
        )
    paths = find_runs(folder)
    if not paths:
        raise ReportError(
            f"no run folders under {folder} (a run folder holds {METRICS_FILE} and {CONFIG_FILE})."
        )
    runs = []
    for path in paths:
        try:
            runs.append(load_run(path, folder))
        except UnreadableRun as error:
            print(f"recsys-report: warning: skipping {path}: {_one_line(error)}", file=sys.stderr)
    if not runs:
        raise ReportError(
            f"none of the {len(paths)} run folders under {folder} can be read (each is named "
            "with its reason above); check that they are complete recsys-train / recsys-eval "
            "runs, or run those again."
        )
    return _distinct_dataset_names(runs)


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
        try:
            image = source.read_bytes()  # read whole before writing: never a partial copy
        except OSError as error:
            print(f"no length histogram for dataset {dataset} ({source}: {error.strerror})")
            continue
        target = folder / f"length_histogram_{dataset.replace('/', '_')}.png"
        target.write_bytes(image)
        copied.append(target)
    return copied


def report(folder: str | Path) -> dict[str, object]:
    """Build the table and plots for the runs under ``folder``; returns what was written."""
    folder = Path(folder)
    runs = load_runs(folder)
    frame = table(runs)
    text = markdown(frame)
    out = folder / REPORT_DIR
    # one folder, published whole: a report is never half-written, and a folder named
    # "report" that recsys-report did not write is refused, not replaced
    # labels come from the runs' files: a "$" in one must not start (failing) mathtext
    with publishing(out, REPORT, folder=True) as tmp, plt.rc_context({"text.parse_math": False}):
        frame.write_csv(tmp / REPORT_CSV)
        (tmp / "report.md").write_text(text + "\n")
        plots = [
            plot_metrics(runs, tmp / "metrics.png"),
            plot_curves(runs, tmp / "val_curves.png"),
            *copy_histograms(runs, tmp),
        ]
    return {
        "runs": runs,
        "table": frame,
        "markdown": text,
        "csv": out / REPORT_CSV,
        "plots": [out / p.name for p in plots if p is not None],
    }


@exit_on_user_error("recsys-report")
def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="recsys-report", description="Table and plots across the runs under a folder."
    )
    parser.add_argument("folder", type=Path, help="a run folder, a sweep folder, or any parent")
    args = parser.parse_args(argv)  # a usage error exits 2 (argparse's own status)
    result = report(args.folder)
    print(result["markdown"])
    print(f"\n{len(result['runs'])} runs. Table: {result['csv']}")
    for plot in result["plots"]:
        print(f"Plot: {plot}")


if __name__ == "__main__":
    main()
