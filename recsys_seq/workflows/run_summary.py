"""The few lines ``recsys-train`` prints before the first epoch: what is trained, on what,
how, and where it goes, so a log file (a SLURM job's, ``make demo > log``) says what run it is
a record of without opening the config."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from recsys_seq.data import SequenceDataModule
from recsys_seq.data.options import DataOptions
from recsys_seq.models import ModelSpec


def summary_lines(
    spec: ModelSpec,
    data: DataOptions,
    datamodule: SequenceDataModule,
    trainer: L.Trainer,
    run_dir: Path,
) -> list[str]:
    """``model``, ``data``, ``fit`` and ``run`` lines (plus the command's overrides under
    Hydra), each a handful of the settings that decide what a run means."""
    loaded = datamodule.data
    batches = (
        f"{data.max_tokens} tokens a batch" if data.max_tokens else f"batches of {data.batch_size}"
    )
    lines = [
        f"model  {spec.name}: encoder {spec.encoder.name}, loss {spec.loss.name}, "
        f"scorer {spec.scorer.name}, {spec.embedding_dim} wide, "
        f"{spec.optimizer.name} lr {spec.optimizer.lr:g}",
        f"data   {datamodule.path}: {len(loaded.users):,} users, {loaded.num_items:,} items, "
        f"{len(loaded.items):,} events; train_windows={data.train_windows}, "
        f"max_len {data.max_len}, {batches}",
        f"fit    {_devices(trainer)}, precision {trainer.precision}, "
        f"up to {_count(trainer.max_epochs, 'epoch')}{_early_stop(trainer)}; "
        f"{_checkpoints(trainer)}",
        f"run    {run_dir}",
    ]
    if HydraConfig.initialized() and HydraConfig.get().overrides.task:
        lines.append(f"given  {' '.join(HydraConfig.get().overrides.task)}")
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _devices(trainer: L.Trainer) -> str:
    kind = type(trainer.accelerator).__name__.removesuffix("Accelerator").lower()
    nodes = f" on {trainer.num_nodes} nodes" if trainer.num_nodes > 1 else ""
    return f"{_count(trainer.num_devices, kind + ' device')}{nodes}"


def _checkpoints(trainer: L.Trainer) -> str:
    best = next(
        (c for c in trainer.callbacks if isinstance(c, ModelCheckpoint) and c.monitor), None
    )
    return f"best checkpoint by {best.monitor}" if best else "no checkpoints written"


def _early_stop(trainer: L.Trainer) -> str:
    stopper = next((c for c in trainer.callbacks if isinstance(c, EarlyStopping)), None)
    if stopper is None:
        return ""
    return f", stopping after {stopper.patience} validations without a better {stopper.monitor}"
