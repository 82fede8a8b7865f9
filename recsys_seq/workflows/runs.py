"""What train and eval runs share: building objects from config, running the baseline,
and writing and printing results."""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from recsys_seq.core import publish
from recsys_seq.core.objects import make
from recsys_seq.core.options import OptionError, Options, checked
from recsys_seq.core.publish import RUN_FILE
from recsys_seq.core.run_folders import METRICS_FILE
from recsys_seq.core.tables import Column, print_table
from recsys_seq.data import SequenceDataModule
from recsys_seq.data.options import DataOptions
from recsys_seq.metrics.beyond_accuracy import HEAD_SHARE
from recsys_seq.models import PopularityRecommender
from recsys_seq.optimized_metric import BEYOND_ACCURACY

LIGHTNING_INFO = logging.getLogger("lightning.pytorch.utilities.rank_zero")


# Lightning's lines that say nothing about the run: its advertising tip, and the notice that
# our own model summary (recsys_seq.callbacks.NetworkSummary) replaces its default one
NOT_ABOUT_THE_RUN = ("💡", "Trainer already configured with model summary callbacks")


def _about_the_run(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(NOT_ABOUT_THE_RUN)


def quiet_console() -> None:
    """Drop Lightning's lines that are not about the run and an internal deprecation warning
    from a run's output; everything else Lightning says is kept. Idempotent."""
    LIGHTNING_INFO.addFilter(_about_the_run)
    _one_copy_of_lightnings_lines()
    warnings.filterwarnings("ignore", message=".*LeafSpec.*is deprecated")
    # metric values are torchmetrics results, already reduced across ranks before logging
    warnings.filterwarnings("ignore", message=".*when logging on epoch level in distributed")
    # our sampler returns every index exactly once in prediction (drop_last is not a thing)
    warnings.filterwarnings("ignore", message=".*custom batch sampler .* for prediction")
    # a two-stage model's frozen retriever stays in eval mode on purpose (TwoStageTask.train)
    warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode at the start")


def _one_copy_of_lightnings_lines() -> None:
    """Lightning's package logger prints to stderr with a handler of its own AND passes each
    line on to the root logger, which Hydra's job logging prints to stdout: a log of both
    streams (``recsys-train > log 2>&1``, a SLURM job's file) had every line twice. Where
    the root logger prints, Lightning's own handler goes."""
    package = logging.getLogger("lightning")
    if logging.getLogger().handlers:
        for handler in list(package.handlers):
            package.removeHandler(handler)


def quiet_lightning() -> None:
    """Keep Lightning's informational lines (devices found, seed set, epochs reached) out of
    the output; its warnings and errors still show. For runs that report in one line each."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


GROUP_BASES = {"callbacks": Callback, "logger": Logger}  # what each group's entries must be


def instantiate_group(cfg: DictConfig, group: str) -> list[Any]:
    """The objects of every non-null entry of ``cfg``'s group ``callbacks`` or ``logger``,
    each one's ``_target_`` a class of that group's fixed table (:mod:`recsys_seq.core.objects`)."""
    entries = OmegaConf.to_container(cfg.get(group) or OmegaConf.create({}), resolve=True)
    if not isinstance(entries, dict):
        raise OptionError(f"{group} must map names to entries ({group}.<name>._target_=...).")
    return [
        make(f"{group}.{name}", values, GROUP_BASES[group])
        for name, values in entries.items()
        if values is not None
    ]


def command_options(cls: type[Options], cfg: DictConfig) -> Options:
    """A command's own top-level options (``k``, ``output``, ``ckpt_path``, ...) checked into
    ``cls``; a value left at Hydra's ``???`` counts as not given."""
    values = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    fields = {f.name for f in dataclasses.fields(cls)}
    given = {k: v for k, v in values.items() if k in fields and v != "???"}
    return checked(cls, given, "")


def build_datamodule(options: DataOptions) -> SequenceDataModule:
    """The datamodule, its source prepared when it has one, and its dataset loaded."""
    datamodule = SequenceDataModule.from_options(options)
    datamodule.prepare_data()
    _ = datamodule.data  # validated on load: errors name the broken file before any work
    return datamodule


def popularity_metrics(
    datamodule: SequenceDataModule,
    ks: list[int],
    exclude_history: bool,
    batches: Mapping[str, int] | None = None,
) -> dict[str, float]:
    """Validation and test metrics of the most-popular baseline, keyed ``popularity/...``.

    Computed in this process (no Trainer, so it also runs unchanged on rank zero of a DDP
    job) over every user, or over the first ``batches[stage]`` batches where the model's own
    evaluation was cut short (``debug=fast``, ``trainer.limit_test_batches``), so that the
    two columns of the results table rank the same users."""
    baseline = PopularityRecommender(datamodule.data.item_counts, ks, exclude_history)
    metrics: dict[str, float] = {}
    for stage in ("val", "test"):
        loader = datamodule.dataloader(stage, num_replicas=1, rank=0)
        limit = (batches or {}).get(stage)
        metrics |= baseline.evaluate(itertools.islice(loader, limit), stage)
    return metrics


def to_floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v.item() if isinstance(v, torch.Tensor) else v) for k, v in metrics.items()}


@rank_zero_only
def write_results(run_dir: Path, metrics: dict[str, Any]) -> Path:
    """Publish ``metrics.json`` (flat ``<stage>/<metric>@<k>`` keys) into the run folder,
    atomically. The run's config is Hydra's ``.hydra/config.yaml`` beside it, written when the
    run starts (so a killed run has it too), with the overrides that made it."""
    text = json.dumps(metrics, indent=2, sort_keys=True) + "\n"
    return publish.write_text(run_dir / METRICS_FILE, text, RUN_FILE)


def _metric_order(name: str) -> tuple:
    """All-item metrics first, then sampled ones; accuracy before beyond-accuracy; by metric,
    then by cut-off."""
    group, _, metric = name.rpartition("/")
    base, _, k = metric.partition("@")
    return (group, base in BEYOND_ACCURACY, base, int(k) if k else 0)


@rank_zero_only
def print_results(metrics: Mapping[str, Any], model_name: str, stage: str = "test") -> None:
    """A table of ``stage`` metrics for the model beside the popularity baseline; the
    beyond-accuracy rows (:data:`~recsys_seq.optimized_metric.BEYOND_ACCURACY`) follow the
    accuracy ones, and sampled metrics (``sampled<n>/...``) the all-item ones, each labelled."""
    names = sorted(
        (k.split("/", 1)[1] for k in metrics if k.startswith(f"{stage}/") and "best_" not in k),
        key=_metric_order,
    )
    title = f"{stage}: next item ranked against all items"
    if any(name.partition("@")[0] in BEYOND_ACCURACY for name in names):
        title += (
            f"\n({', '.join(BEYOND_ACCURACY)} rows: the users' top-K lists across the "
            f"catalogue;\n avg_pop in training events; tail: the items outside the head that "
            f"holds {HEAD_SHARE:.0%} of them)"
        )
    if any("sampled" in name for name in names):
        title += "\n(sampled<n>/ rows: against n fixed sampled negatives instead)"
    columns = [Column("metric"), Column(model_name, right=True)]
    # a two-stage run: its retriever alone on the same users, then the popularity baseline
    others = [p for p in ("retriever", "popularity") if any(k.startswith(f"{p}/") for k in metrics)]
    for other in others:
        ratio = "ratio" if other == "popularity" else f"vs {other}"
        columns += [Column(other, right=True), Column(ratio, right=True)]
    rows = []
    for name in names:
        ours = metrics[f"{stage}/{name}"]
        row = [name, f"{ours:.4f}"]
        for other in others:
            theirs = metrics.get(f"{other}/{stage}/{name}", float("nan"))
            digits = 1 if other == "popularity" else 3
            row += [f"{theirs:.4f}", f"{ours / theirs:.{digits}f}x" if theirs > 0 else "-"]
        rows.append(row)
    print_table(columns, rows, title)
