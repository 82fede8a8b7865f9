"""Test a checkpoint on a prepared dataset; the library behind ``recsys-eval``:

    recsys-eval ckpt_path=outputs/train/runs/<run>/checkpoints/best.ckpt
    recsys-eval ckpt_path=<ckpt> data.path=<another prepared dir with the same items>
    recsys-eval ckpt_path=<ckpt> exclude_history=true   # rank without the user's history
    recsys-eval -m ckpt_path=<blended two-stage ckpt> stage=val blend=0.3,0.5,0.7   # choose w

The model is rebuilt by :mod:`recsys_seq.checkpoint` from the checked spec stored in the
checkpoint (read with ``weights_only=True``: tensors and plain values, never code). The data
folder (the checkpoint's own, or ``data.path``) must hold a prepared dataset with the same
items; nothing is prepared or written into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig

from recsys_seq import checkpoint, configs
from recsys_seq.core.options import as_plain, option
from recsys_seq.core.publish import claim_run_folder
from recsys_seq.data import SequenceDataModule
from recsys_seq.data.options import data_options
from recsys_seq.models import ModelSpec, NextItemTask
from recsys_seq.workflows import runs
from recsys_seq.workflows.trainer import build_trainer, check_trainer, trainer_errors


def restore(
    ckpt_path: str | Path,
    data_overrides: DictConfig | dict | None = None,
    exclude_history: bool | None = None,
    blend: float | None = None,
) -> tuple[NextItemTask, SequenceDataModule, ModelSpec]:
    """Rebuild a checkpoint's model and its datamodule (the trained data options with the
    non-null ``data_overrides`` merged in), refusing data with another item vocabulary and
    windows longer than the model reads. Nothing is prepared or written: the data folder
    must hold a prepared dataset. The model ranks with or without the user's history as it
    was trained to, or as ``exclude_history`` says for this use; a blended two-stage model
    with its trained shares, or the ranker's share ``blend``.

    Returns:
        ``(model, datamodule, spec)``; the model holds the checkpoint's weights.
    """
    trained = checkpoint.open_checkpoint(ckpt_path)
    if blend is not None:
        trained.reblended(blend)  # refused before the data is read
    overrides = {k: v for k, v in configs.plain(data_overrides).items() if v is not None}
    data = data_options({**as_plain(trained.data), **overrides, "source": None})
    configs.check_max_len(trained.spec, data.max_len)
    datamodule = runs.build_datamodule(data)
    checkpoint.check_same_items(
        trained.spec, datamodule.meta["item_fingerprint"], datamodule.path, Path(ckpt_path)
    )
    return trained.build(datamodule.facts(), exclude_history, blend), datamodule, trained.spec


@dataclass(frozen=True)
class EvalOptions:
    """The command's own options (``conf/eval.yaml``), checked before any work."""

    ckpt_path: str
    stage: Literal["test", "val"] = "test"  # the held-out events ranked: test, or validation
    exclude_history: bool | None = None  # None: as trained
    blend: float | None = option(None, min=0.0, max=1.0)  # a blend's ranker share; None: trained
    baselines: bool = True


def evaluate(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """Test the checkpoint ``cfg.ckpt_path`` (or validate it: ``stage=val``); returns
    ``(metrics, objects)`` like ``train``, the metrics keyed ``<stage>/...``."""
    runs.quiet_console()
    options = runs.command_options(EvalOptions, cfg)
    check_trainer(configs.plain(cfg.trainer))
    model, datamodule, spec = restore(
        options.ckpt_path, cfg.get("data"), options.exclude_history, options.blend
    )
    trainer = build_trainer(cfg.trainer, logger=False, enable_checkpointing=False)
    run_stage = trainer.test if options.stage == "test" else trainer.validate
    metrics: dict[str, Any] = {}
    with trainer_errors():
        results = run_stage(model, datamodule=datamodule, verbose=False)
    for result in results:
        metrics.update(runs.to_floats(result))
    if options.baselines:
        metrics.update(
            runs.popularity_metrics(datamodule, list(spec.evaluated_ks), model.exclude_history)
        )
    metrics["checkpoint"] = str(Path(options.ckpt_path).resolve())
    return metrics, {"datamodule": datamodule, "model": model, "trainer": trainer, "spec": spec}


def record(cfg: DictConfig, metrics: dict[str, Any], objects: dict[str, Any]) -> Path:
    """Write ``metrics.json`` into the evaluation's run folder, claimed for this task only now
    that the work is done (never a folder that holds the checkpoint or the data)."""
    inputs = [objects["datamodule"].path, Path(cfg.ckpt_path)]
    run_dir = claim_run_folder(cfg.paths.output_dir, inputs, task=str(cfg.task_name))
    return runs.write_results(run_dir, metrics)
