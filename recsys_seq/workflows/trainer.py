"""The Lightning Trainer of a run: its options checked before any work, Lightning's own
refusals reported as option errors."""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import lightning as L
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException

from recsys_seq import configs
from recsys_seq.core.options import OptionError, checked, option
from recsys_seq.core.typos import unknown_names


@dataclass(frozen=True)
class TrainerOptions:
    """The Lightning Trainer options the project's configs set, checked before the run starts
    (any other ``+trainer.<key>`` goes to Lightning as it is, which checks it)."""

    accelerator: Literal["cpu", "gpu", "cuda", "mps", "tpu", "auto"] = "cpu"
    devices: int | Literal["auto"] | list[int] = 1
    num_nodes: int = option(1, min=1)
    strategy: str = "auto"
    precision: Literal[
        "64-true",
        "64",
        "32-true",
        "32",
        "16-mixed",
        "bf16-mixed",
        "bf16-true",
        "16-true",
        64,
        32,
        16,
    ] = "32-true"
    min_epochs: int | None = option(None, min=0)
    max_epochs: int = option(20, min=1)
    max_steps: int = option(-1, min=-1)
    check_val_every_n_epoch: int = option(1, min=1)
    log_every_n_steps: int = option(50, min=1)
    num_sanity_val_steps: int = option(0, min=-1)
    use_distributed_sampler: bool = False
    deterministic: bool | Literal["warn"] = False
    limit_train_batches: int | float | None = option(None, min=0, max=None)
    limit_val_batches: int | float | None = option(None, min=0)
    limit_test_batches: int | float | None = option(None, min=0)
    fast_dev_run: bool | int = False
    default_root_dir: str | None = None
    gradient_clip_val: float | None = option(None, min=0.0)
    accumulate_grad_batches: int = option(1, min=1)


def check_trainer(values: Mapping[str, Any]) -> None:
    """Check the known Trainer options (``trainer.<key>``) with one message per mistake."""
    accepted = set(inspect.signature(L.Trainer.__init__).parameters) - {"self"}
    unknown = sorted(set(values) - accepted)
    if unknown:
        raise OptionError(
            f"{unknown_names(unknown, accepted, 'trainer')}: Lightning's Trainer takes no such "
            "argument (see its documentation for the ones it takes)."
        )
    known = {f for f in TrainerOptions.__dataclass_fields__}
    options = checked(TrainerOptions, {k: v for k, v in values.items() if k in known}, "trainer")
    if options.accelerator in ("gpu", "cuda") and not _has_gpu(options.accelerator):
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise OptionError(
            f"trainer.accelerator={options.accelerator} (trainer=gpu, trainer=ddp) needs a GPU, "
            f"and torch {torch.__version__} ({build}) finds none on this machine: use "
            "trainer=cpu (the default), or install a CUDA build of torch where a GPU is."
        )
    if options.devices == [] or (isinstance(options.devices, int) and options.devices < 1):
        raise OptionError(f"trainer.devices must be >= 1, 'auto' or a list, got {options.devices}.")
    for stage in ("train", "val", "test"):
        limit = getattr(options, f"limit_{stage}_batches")
        if limit is not None and (limit == 0 or (isinstance(limit, float) and limit > 1)):
            raise OptionError(
                f"trainer.limit_{stage}_batches must be a number of batches >= 1 or a fraction "
                f"in (0, 1], got {limit}."
            )
    if isinstance(options.fast_dev_run, int) and options.fast_dev_run < 0:
        raise OptionError(
            f"trainer.fast_dev_run must be true, false or >= 1, got {options.fast_dev_run}."
        )


def _has_gpu(accelerator: str) -> bool:
    """Whether Lightning's ``accelerator`` finds a device (``gpu`` is CUDA or Apple's MPS)."""
    return torch.cuda.is_available() or (accelerator == "gpu" and torch.backends.mps.is_available())


def build_trainer(trainer: Mapping[str, Any], **decided: Any) -> L.Trainer:
    """Lightning's Trainer with the run's ``trainer`` options, a config section or its plain
    values (always that class: the options name no class); options Lightning refuses (no GPU
    for ``accelerator=gpu``, an unknown strategy) are reported as the option errors they are.

    ``decided`` are what the command itself settles (its callbacks, no bar in a log file, no
    checkpoints when it only predicts): they replace the same keys of ``trainer``, so a
    user's ``++trainer.enable_progress_bar=false`` agrees with the command instead of clashing.
    """
    values = {**configs.plain(trainer), **decided}
    with trainer_errors():
        try:
            return L.Trainer(**values)
        except (ValueError, TypeError, ImportError) as error:
            raise OptionError(f"The trainer options do not work here: {error}") from None


@contextmanager
def trainer_errors() -> Iterator[None]:
    """Lightning's own verdict on a configuration (MisconfigurationException) as an option
    error, e.g. ``trainer.limit_train_batches`` so small that no batch is left."""
    try:
        yield
    except MisconfigurationException as error:
        raise OptionError(f"The trainer options do not work here: {error}") from None
