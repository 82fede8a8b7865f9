"""The run folders under a folder, found and read into :class:`Run` records.

A run folder is any folder holding ``metrics.json`` and ``config.yaml`` (what recsys-train and
recsys-eval write). This module owns what a run's files mean: its model (Hydra's choice, the
config's name, or an older run's ``_target_`` class, read as a string only), its dataset and
data folder, the metric it optimised (``model.monitor``), and a name for each run and dataset
that tells them apart. Opening the files is :mod:`recsys_seq.report.files`'s job; a run one of
whose files it refuses is skipped here with one warning line.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from data_prep.errors import UserError
from data_prep.run_folders import CONFIG_FILE, METRICS_FILE
from recsys_seq.report.files import (
    UnreadableRun,
    load_config,
    load_metrics,
    load_overrides,
    load_yaml,
    one_line,
    read_curve,
)

HYDRA_FILE = ".hydra/hydra.yaml"
DEFAULT_MONITOR = "ndcg@10"  # runs whose config names no model.monitor
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
    monitor: str = DEFAULT_MONITOR  # the validation metric the run optimised
    curve: pl.DataFrame | None = field(default=None, repr=False)  # epoch, value (of monitor)

    @property
    def label(self) -> str:
        """Short plot label: the model, then the overrides that are not the model choice."""
        extra = [o for o in self.overrides if not o.startswith(LABEL_SKIPS)]
        return " ".join([self.model, *extra]) if extra else f"{self.model} ({self.name})"


def lookup(data: object, *keys: str) -> str | None:
    """The string at ``data[k1][k2]...``; None where a level is missing or not a mapping, or
    the value is not a string."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, str) else None


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


def load_run(run: Path, root: Path) -> Run:
    """Read one run folder (below ``root``, which names it).

    Raises:
        UnreadableRun: a file of the run cannot be read, or does not hold what runs write.
    """
    metrics = load_metrics(run)
    config = load_config(run)
    overrides = load_overrides(run)
    data_path = lookup(config, "data", "path") or _source_path(config)
    monitor = lookup(config, "model", "monitor") or DEFAULT_MONITOR
    relative = run.relative_to(root)
    return Run(
        path=run,
        name=str(relative) if str(relative) != "." else run.name,
        model=model_name(config, run),
        dataset=Path(data_path).name if data_path else "?",
        data_path=resolve_data_path(data_path, run),
        overrides=overrides,
        metrics=metrics,
        monitor=monitor,
        curve=read_curve(run, monitor),
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
            print(f"recsys-report: warning: skipping {path}: {one_line(error)}", file=sys.stderr)
    if not runs:
        raise ReportError(
            f"none of the {len(paths)} run folders under {folder} can be read (each is named "
            "with its reason above); check that they are complete recsys-train / recsys-eval "
            "runs, or run those again."
        )
    return _distinct_dataset_names(runs)
