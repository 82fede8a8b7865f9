"""The run folders under a folder, found and read into :class:`Run` records.

A run folder is any folder holding ``metrics.json`` and a config: Hydra's
``.hydra/config.yaml`` (what recsys-train and recsys-eval keep), or the resolved
``config.yaml`` older runs wrote. This module owns what a run's files mean: its model (Hydra's
choice, the config's name, or an older run's ``_target_`` class, read as a string only; an
evaluation's from its checkpoint's training run), its dataset and data folder, the metric it
optimised (``optimized_metric``; older runs: ``val/`` + ``model.monitor``), whether it was a
debug run (:mod:`recsys_seq.report.debug`), and a name for each run and dataset that tells
them apart. Opening the files is the job of :mod:`recsys_seq.report.files` (the loggers'
files: :mod:`recsys_seq.report.curves`); a run one of whose files it refuses is skipped here
with one warning line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from recsys_seq.core.artifacts import read_marker
from recsys_seq.core.errors import UserError
from recsys_seq.core.run_folders import CONFIG_FILE, METRICS_FILE, RUN
from recsys_seq.optimized_metric import DEFAULT as DEFAULT_METRIC
from recsys_seq.report.curves import LOSS, read_curve
from recsys_seq.report.debug import debug_reason
from recsys_seq.report.files import (
    CHECKPOINT,
    HYDRA_CONFIG_FILE,
    HYDRA_FILE,
    UnreadableRun,
    config_file,
    load_config,
    load_metrics,
    load_overrides,
    load_yaml,
    lookup,
    one_line,
    shown,
)

WARNING = "recsys-report: warning:"
# encoder / model class of a ``_target_`` (runs made before the model registry) -> model name
MODEL_NAMES = {
    "SelfAttentionEncoder": "sasrec",
    "GRUEncoder": "gru",
    "TargetAttention": "din",
    "TargetAttentionRecommender": "din",
}


class ReportError(UserError):
    """Nothing to report: no such folder, no run folder under it, or none readable."""


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
    metric: str = DEFAULT_METRIC  # the validation metric the run optimised (val/ndcg@10)
    curve: pl.DataFrame | None = field(default=None, repr=False)  # epoch, value (of metric)
    curve_source: str | None = None  # the log the curve was read from (csv, tensorboard, ...)
    curve_unread: str | None = None  # why a log the run wrote gave no curve
    loss: pl.DataFrame | None = field(default=None, repr=False)  # epoch, mean training loss
    debug: str | None = None  # what makes it a debug run (debug=fast), None for a real one

    @property
    def metric_name(self) -> str:
        """The optimised metric without its stage: ``ndcg@10``."""
        return self.metric.removeprefix("val/")


def find_runs(folder: Path) -> list[Path]:
    """Every folder at or below ``folder`` holding an entry named metrics.json and a config
    (``config.yaml`` or ``.hydra/config.yaml``), sorted (numbered sweep folders in numeric
    order). Names, not files: a run whose metrics.json is a dangling link or a folder is found,
    and then skipped with a warning, not ignored."""
    found = {
        Path(top)
        for top, dirs, files in os.walk(folder)  # symbolic links to folders are not followed
        if METRICS_FILE in {*dirs, *files} and config_file(Path(top))
    }

    def key(path: Path) -> tuple:
        return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.parts)

    return sorted(found, key=key)


def model_name(config: dict, hydra: object) -> str:
    """The model's config name: Hydra's choice (``.hydra/hydra.yaml``), else ``model.name``,
    else the class named by an older run's ``_target_`` (only the string is read)."""
    choice = lookup(hydra, "hydra", "runtime", "choices", "model")
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


def key_metrics(optimized: Sequence[str]) -> list[str]:
    """The test metrics that show how runs did at what they optimised: ``test/<name>`` of each
    optimised ``val/<name>``, then ``test/hr@<k>`` at their cut-offs, without repeats."""
    names = [m.removeprefix("val/") for m in optimized]
    hits = [f"hr@{n.partition('@')[2]}" for n in names if "@" in n]
    return [f"test/{n}" for n in dict.fromkeys(names + hits)]


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


def load_run(run: Path, root: Path) -> Run:
    """Read one run folder (below ``root``, which names it).

    Raises:
        UnreadableRun: a file of the run cannot be read, or does not hold what runs write.
    """
    metrics = load_metrics(run)
    hydra = load_yaml(run, HYDRA_FILE) if (run / HYDRA_FILE).exists() else None
    config = load_config(run, hydra)
    overrides = load_overrides(run)
    runtime_cwd = lookup(hydra, "hydra", "runtime", "cwd")
    metric = optimized_metric(config, config_file(run) or CONFIG_FILE)
    data_path = _data_path(config)
    model = model_name(config, hydra)
    debug = _debug(config, overrides, hydra)
    trained = _training_run(metrics) if "model" not in config else None
    if trained is not None:  # an evaluation: its checkpoint's training run names these
        model = model_name(trained.config, trained.hydra)
        data_path = data_path or _data_path(trained.config)
        metric = metric if "optimized_metric" in config else trained.metric
        debug = debug or trained.debug
    curve = read_curve(run, metric, config, runtime_cwd)
    loss = read_curve(run, LOSS, config, runtime_cwd, per_epoch="mean")
    relative = run.relative_to(root)
    return Run(
        path=run,
        name=str(relative) if str(relative) != "." else run.name,
        model=model,
        dataset=Path(data_path).name if data_path else "?",
        data_path=resolve_data_path(data_path, run),
        overrides=overrides,
        metrics=metrics,
        metric=metric,
        curve=curve.points,
        curve_source=curve.source,
        curve_unread=curve.unread,
        loss=loss.points,
        debug=debug,
    )


def optimized_metric(config: dict, name: str) -> str:
    """The validation metric the run optimised: ``optimized_metric``, else (older runs)
    ``val/`` + ``model.monitor``, else :data:`DEFAULT_METRIC`. ``name``: the config's file.

    Raises:
        UnreadableRun: ``optimized_metric`` is there but not a ``val/...`` key.
    """
    if "optimized_metric" in config:
        metric = config["optimized_metric"]
        if not (isinstance(metric, str) and metric.startswith("val/") and len(metric) > 4):
            raise UnreadableRun(
                f"{name}: optimized_metric is {shown(metric)}, not a validation metric key "
                "like val/ndcg@10"
            )
        return metric
    monitor = lookup(config, "model", "monitor")
    return f"val/{monitor}" if monitor else DEFAULT_METRIC


@dataclass(frozen=True)
class TrainingRun:
    """What an evaluation's run folder takes from its checkpoint's training run."""

    config: dict
    hydra: object
    metric: str
    debug: str | None  # why that run is a debug run (its metrics are a few batches'), or None


def _training_run(metrics: dict) -> TrainingRun | None:
    """The training run whose checkpoint an evaluation ranked (metrics.json's absolute
    ``checkpoint``, at ``<training run>/checkpoints/<file>``); None where the checkpoint is
    not in a marked run folder whose config names a model, or that folder is unreadable."""
    checkpoint = metrics.get(CHECKPOINT)
    if not isinstance(checkpoint, str) or not Path(checkpoint).is_absolute():
        return None
    folder = Path(checkpoint).parent
    run = folder.parent
    marker = read_marker(run)
    if folder.name != "checkpoints" or marker is None or marker.get("artifact") != RUN:
        return None
    try:
        hydra = load_yaml(run, HYDRA_FILE) if os.path.lexists(run / HYDRA_FILE) else None
        config = load_config(run, hydra)
        metric = optimized_metric(config, str(run / (config_file(run) or CONFIG_FILE)))
        debug = _debug(config, load_overrides(run), hydra)
    except (UnreadableRun, OSError):
        return None
    if "model" not in config:
        return None
    return TrainingRun(config, hydra, metric, debug and f"its checkpoint's training run: {debug}")


def _debug(config: dict, overrides: list[str], hydra: object) -> str | None:
    """Why a run folder holds a debug run (:func:`debug_reason`), or None."""
    return debug_reason(config, overrides, lookup(hydra, "hydra", "runtime", "choices", "debug"))


def _data_path(config: dict) -> str | None:
    """The data folder a run's config names: ``data.path``, else its shared source's."""
    return lookup(config, "data", "path") or _source_path(config)


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


def load_runs(folder: Path, include_debug: bool = False) -> list[Run]:
    """Every readable run folder under ``folder``, debug runs left out unless
    ``include_debug``. Each unreadable run is skipped with one warning line on stderr; left-out
    debug runs and runs whose curve could not be read are named in one line each.

    Raises:
        ReportError: no folder, no run folder, no readable one, or only debug runs.
    """
    if not folder.is_dir():
        raise ReportError(
            f"folder={folder} is not a folder; give a run folder, a sweep folder or a parent."
        )
    paths = find_runs(folder)
    if not paths:
        raise ReportError(
            f"no run folders under {folder} (a run folder holds {METRICS_FILE} and "
            f"{CONFIG_FILE} or {HYDRA_CONFIG_FILE})."
        )
    runs = []
    for path in paths:
        try:
            runs.append(load_run(path, folder))
        except UnreadableRun as error:
            print(f"{WARNING} skipping {path}: {one_line(error)}", file=sys.stderr)
    if not runs:
        raise ReportError(
            f"none of the {len(paths)} run folders under {folder} can be read (each is named "
            "with its reason above); check that they are complete recsys-train / recsys-eval "
            "runs, or run those again."
        )
    debug = [r for r in runs if r.debug]
    if debug and not include_debug:
        if len(debug) == len(runs):
            raise ReportError(
                f"all {len(runs)} runs under {folder} are debug runs (e.g. {debug[0].path}: "
                f"{debug[0].debug}); include_debug=true reports them."
            )
        print(
            f"recsys-report: left out {len(debug)} debug run(s) (e.g. {debug[0].path}: "
            f"{debug[0].debug}); include_debug=true reports them.",
            file=sys.stderr,
        )
        runs = [r for r in runs if not r.debug]
    _warn_unread_curves(runs)
    return _distinct_dataset_names(runs)


def _warn_unread_curves(runs: list[Run]) -> None:
    """One warning line per reason a log gave no curve, naming the first run."""
    unread: dict[str, list[Run]] = {}
    for run in runs:
        if run.curve is None and run.curve_unread:
            unread.setdefault(run.curve_unread, []).append(run)
    for reason, group in unread.items():
        print(
            f"{WARNING} no validation curve for {len(group)} run(s) (e.g. {group[0].path}): "
            f"{reason}",
            file=sys.stderr,
        )
