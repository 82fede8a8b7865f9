"""Lightning callbacks of the project."""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import EMAWeightAveraging, RichModelSummary
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.model_summary import ModelSummary
from rich import get_console
from torch import nn
from torchmetrics import Metric, MetricCollection


class RNGStateCheckpoint(L.Callback):
    """Saves the random generators' state in checkpoints and restores it on resume.

    Lightning restores weights, optimiser and loop progress but not the generators that drive
    dropout and negative sampling, so a resumed run would draw different numbers than an
    uninterrupted one. The state is applied at the first training batch after resuming, after
    the data loader's own set-up has consumed its draws, exactly where the interrupted run
    stood when it saved. States are tensors, so checkpoints still load with ``weights_only``.
    """

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        checkpoint["rng_state"] = {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        self._pending = checkpoint.get("rng_state")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if self._pending is None:
            return
        torch.set_rng_state(self._pending["torch"])
        if self._pending["cuda"]:
            torch.cuda.set_rng_state_all(self._pending["cuda"])
        self._pending = None


class NetworkSummary(RichModelSummary):
    """Lightning's model summary of the network's parts only.

    The task holds its metric objects (``val_metrics``, ``test_sampled``, ``val_best``) as
    modules, so Lightning's summary would list them as layers with 0 parameters; they are left
    out of the rows and of the module counts (they have no parameters, so the totals are the
    same). DeepSpeed stage 3 keeps Lightning's own summary (its parameters are sharded)."""

    def _summary(self, trainer: L.Trainer, pl_module: L.LightningModule) -> ModelSummary:
        if getattr(trainer.strategy, "zero_stage_3", False):
            return super()._summary(trainer, pl_module)
        return _LayersOnly(pl_module, max_depth=self._max_depth)


class _LayersOnly(ModelSummary):
    """A :class:`ModelSummary` without modules that hold only metrics."""

    @property
    def named_modules(self) -> list[tuple[str, nn.Module]]:
        hidden = _metric_modules(self._model)
        return [(n, m) for n, m in super().named_modules if not _under(n, hidden)]

    @property
    def total_training_modes(self) -> dict[str, int]:
        hidden = _metric_modules(self._model)
        modes = [m.training for n, m in self._model.named_modules() if n and not _under(n, hidden)]
        return {"train": modes.count(True), "eval": modes.count(False)}


def _metric_modules(model: nn.Module) -> list[str]:
    """Names of the submodules that are metrics or hold nothing but metrics."""
    return [name for name, module in model.named_modules() if name and _only_metrics(module)]


def _only_metrics(module: nn.Module) -> bool:
    if isinstance(module, (Metric, MetricCollection)):
        return True
    children = list(module.children())
    own = any(True for _ in module.parameters(recurse=False))
    return bool(children) and not own and all(_only_metrics(c) for c in children)


def _under(name: str, prefixes: list[str]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in prefixes)


class StepLossCallback(L.Callback):
    """A callback that reads each training step's loss, detached, from what
    ``training_step`` returned (a tensor or a dict with ``loss``), through
    :meth:`on_step_loss`; a skipped step (None) is not passed on."""

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch, batch_idx
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None:
            self.on_step_loss(loss.detach())

    def on_step_loss(self, loss: torch.Tensor) -> None:
        """One training step's loss (detached, on the device)."""
        raise NotImplementedError


class EpochLog(StepLossCallback):
    """One plain line per epoch: ``epoch 4/200  loss 7.8105  val/ndcg@10 0.0410  best 0.0410
    63 s``.

    The progress bar redraws one line in place, so a log file (a SLURM job's output, ``make demo
    > log``) shows nothing until the run ends, and a terminal keeps no record of past epochs.
    These lines go through rich's console, the bar's own: above the bar on a terminal, plain
    text in a file. The loss is the epoch's mean, summed on the device (no sync per step).
    """

    def __init__(self) -> None:
        self._loss_sum: torch.Tensor | None = None
        self._steps = 0
        self._started = 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._loss_sum, self._steps, self._started = None, 0, time.monotonic()

    def on_step_loss(self, loss: torch.Tensor) -> None:
        loss = loss.float()
        self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
        self._steps += 1

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        epochs = "" if trainer.max_epochs in (None, -1) else f"/{trainer.max_epochs}"
        parts = [f"epoch {trainer.current_epoch + 1}{epochs}"]
        if self._steps:
            parts.append(f"loss {self._loss_sum.item() / self._steps:.4f}")
        metrics, spec = trainer.callback_metrics, getattr(pl_module, "spec", None)
        if spec is not None and spec.optimized_metric in metrics:
            parts.append(f"{spec.optimized_metric} {metrics[spec.optimized_metric].item():.4f}")
        if spec is not None and spec.best_key in metrics:
            parts.append(f"best {metrics[spec.best_key].item():.4f}")
        parts.append(f"{time.monotonic() - self._started:.0f} s")
        get_console().print("  ".join(parts), markup=False, highlight=False, soft_wrap=True)


class StopOnDivergence(StepLossCallback):
    """Stops training after an epoch in which the training loss was NaN or infinite on any
    process.

    Why: a diverged model stays diverged (its weights are NaN or inf from then on), and its
    validation reads 0 (NaN scores rank last), so early stopping would wait ``patience`` more
    epochs of a dead model, and with ``patience`` large, run to ``max_epochs``. The checkpoints
    keep the best epoch before the divergence, which the run then tests. The check is a flag
    and-ed on the device every step and read once per epoch (no sync per step), agreed across
    processes under DDP so they all stop at the same epoch.
    """

    def __init__(self) -> None:
        self._finite: torch.Tensor | None = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._finite = None

    def on_step_loss(self, loss: torch.Tensor) -> None:
        finite = torch.isfinite(loss).all()
        self._finite = finite if self._finite is None else self._finite & finite

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        finite_here = self._finite is None or bool(self._finite)
        if trainer.strategy.reduce_boolean_decision(finite_here, all=True):
            return
        trainer.should_stop = True
        if trainer.is_global_zero:
            get_console().print(
                f"training stopped after epoch {trainer.current_epoch + 1}: the training loss "
                "was NaN or infinite (the model diverged); the best checkpoint is the best "
                "epoch before it. A lower model.optimizer.lr, or gradient clipping "
                "(+trainer.gradient_clip_val=1.0), usually keeps a run stable.",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


class WeightAverage(EMAWeightAveraging):
    """An exponential moving average of the weights (``decay`` per optimiser step), which
    validation, every checkpoint, the run's test, ``recsys-eval`` and serving all read.

    Why: with a constant learning rate and heavy dropout the weights jitter from step to step;
    their average over the last ``1 / (1 - decay)`` steps ranks better at equal epochs
    (docs/results.md). Lightning's own callback validates and checkpoints the average, but when
    the same Trainer then tests a checkpoint it puts the raw weights back (it keeps them in the
    checkpoint for resuming), so a run would report the test of weights its validation never
    chose. Here only fitting restores them; everything else reads the averaged ``state_dict``.

    Args:
        decay: weight of the running average at each step (0.999: about the last 1,000
            steps, for logs of hundreds of steps an epoch).
    """

    def __init__(self, decay: float = 0.999) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must lie strictly between 0 and 1, got {decay}")
        super().__init__(decay=decay)

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        if trainer.state.fn == TrainerFn.FITTING:  # resuming: raw weights and the average
            super().on_load_checkpoint(trainer, pl_module, checkpoint)
