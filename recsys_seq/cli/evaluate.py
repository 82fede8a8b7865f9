"""recsys-eval: test a checkpoint on a prepared dataset.

    recsys-eval ckpt_path=outputs/train/runs/<run>/checkpoints/best.ckpt
    recsys-eval ckpt_path=<ckpt> data.path=<another prepared dir with the same items>
    recsys-eval ckpt_path=<ckpt> exclude_history=true   # rank without the user's history

The model is rebuilt by :mod:`recsys_seq.checkpoint` from the checked spec stored in the
checkpoint (read with ``weights_only=True``: tensors and plain values, never code). The data
folder (the checkpoint's own, or ``data.path``) must hold a prepared dataset with the same
items; nothing is prepared or written into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from data_prep.errors import exit_on_user_error, run_command
from data_prep.publish import claim_run_folder
from recsys_seq import checkpoint, configs
from recsys_seq.cli import runs
from recsys_seq.cli.trainer import build_trainer, check_trainer, trainer_errors
from recsys_seq.data import SequenceDataModule
from recsys_seq.data.options import data_options
from recsys_seq.models import ModelSpec, NextItemTask
from recsys_seq.options import as_plain


def restore(
    ckpt_path: str | Path, data_overrides: DictConfig | dict | None = None
) -> tuple[NextItemTask, SequenceDataModule, ModelSpec]:
    """Rebuild a checkpoint's model and its datamodule (the trained data options with the
    non-null ``data_overrides`` merged in), refusing data with another item vocabulary and
    windows longer than the model reads. Nothing is prepared or written: the data folder
    must hold a prepared dataset.

    Returns:
        ``(model, datamodule, spec)``; the model holds the checkpoint's weights.
    """
    trained = checkpoint.open_checkpoint(ckpt_path)
    overrides = {k: v for k, v in configs.plain(data_overrides).items() if v is not None}
    data = data_options({**as_plain(trained.data), **overrides, "source": None})
    configs.check_max_len(trained.spec, data.max_len)
    datamodule = runs.build_datamodule(data)
    checkpoint.check_same_items(
        trained.spec, datamodule.meta["item_fingerprint"], datamodule.path, Path(ckpt_path)
    )
    return trained.build(datamodule.facts()), datamodule, trained.spec


@dataclass(frozen=True)
class EvalOptions:
    """The command's own options (``conf/eval.yaml``), checked before any work."""

    ckpt_path: str
    exclude_history: bool | None = None  # None: as trained
    baselines: bool = True


def evaluate(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """Test the checkpoint ``cfg.ckpt_path``; returns ``(metrics, objects)`` like ``train``."""
    runs.quiet_console()
    options = runs.command_options(EvalOptions, cfg)
    check_trainer(configs.plain(cfg.trainer))
    model, datamodule, spec = restore(options.ckpt_path, cfg.get("data"))
    if options.exclude_history is not None:
        model.exclude_history = options.exclude_history
    trainer = build_trainer(cfg.trainer, logger=False, enable_checkpointing=False)
    metrics: dict[str, Any] = {}
    with trainer_errors():
        tested = trainer.test(model, datamodule=datamodule, verbose=False)
    for result in tested:
        metrics.update(runs.to_floats(result))
    if options.baselines:
        metrics.update(
            runs.popularity_metrics(datamodule, list(spec.evaluated_ks), model.exclude_history)
        )
    metrics["checkpoint"] = str(Path(options.ckpt_path).resolve())
    return metrics, {"datamodule": datamodule, "model": model, "trainer": trainer, "spec": spec}


@hydra.main(version_base="1.3", config_path=configs.CONF_SEARCH_PATH, config_name="eval")
@exit_on_user_error("recsys-eval")
def _main(cfg: DictConfig) -> None:
    metrics, objects = evaluate(cfg)
    inputs = [objects["datamodule"].path, Path(cfg.ckpt_path)]
    run_dir = claim_run_folder(cfg.paths.output_dir, inputs, task=str(cfg.task_name))
    path = runs.write_results(run_dir, metrics)
    runs.print_results(metrics, model_name=objects["spec"].name)
    print(f"Results: {path}")


def main() -> None:
    run_command(_main, "recsys-eval")


if __name__ == "__main__":
    main()
