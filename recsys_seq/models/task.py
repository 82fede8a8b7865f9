"""The one LightningModule that trains, evaluates and serves a :class:`NextItemModel`."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torchmetrics import MaxMetric

from recsys_seq.core.options import OptionError
from recsys_seq.data.facts import DataFacts
from recsys_seq.metrics import top_scored
from recsys_seq.models.losses import Loss
from recsys_seq.models.network import NextItemModel
from recsys_seq.models.ranking import RankingModule, rankable_scores
from recsys_seq.models.spec import (
    RECORD_KEY,
    ModelSpec,
    RerankSpec,
    WarmupCosineOptions,
    checkpoint_record,
)

OPTIMIZERS = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}


class NextItemTask(RankingModule):
    """Next-item recommendation: the loss in training, all-item ranking metrics (and, with
    the data's training counts, beyond-accuracy ones) in validation and test
    (:class:`RankingModule`), top-K lists in prediction.

    Every model of the project is this task over a different :class:`NextItemModel`
    (SASRec: self-attention + dot product; GRU4Rec: GRU + dot product; DIN: identity + target
    attention), built from a :class:`ModelSpec` by :func:`recsys_seq.models.build_model`.

    Args:
        spec: the checked spec the parts were built from; stored in every checkpoint.
        model: the network.
        loss: ``loss(states, batch, model) -> scalar`` (:mod:`recsys_seq.models.losses`).
        facts: what the task knows about its data (:class:`DataFacts`).
    """

    rerank: RerankSpec | None = None  # a two-stage model's retriever (TwoStageTask)

    def __init__(self, spec: ModelSpec, model: NextItemModel, loss: Loss, facts: DataFacts) -> None:
        super().__init__(
            spec.evaluated_ks,
            spec.exclude_history,
            facts.sampled_negatives,
            progress_metric=spec.optimized_metric,
            item_counts=facts.item_counts,
        )
        self.spec = spec
        self.model = model
        self.loss = loss
        self.data_record = facts.record
        self.catalogue = facts.catalogue
        self.val_best = MaxMetric()
        self.predict_k = max(spec.ks)  # recommendations per user in predict_step

    def score_next(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model.score_next(batch)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        # PAD positions are scored too and weighted out by the loss: no data-dependent
        # boolean gather, i.e. no host-device sync per step; bucketing keeps that waste small.
        states = self.model.encode(batch)  # (B, T, D)
        if "target" in batch:  # one target per window (data.train_windows=prefixes)
            states, batch = last_position(states, batch)  # (B, 1, D)
        loss = self.loss(states, batch, self.model)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["lengths"].shape[0])
        return loss

    def on_validation_epoch_end(self) -> None:
        values = self._log_stage("val")
        if self.trainer.sanity_checking:
            return
        self.val_best(values[self.spec.optimized_metric.removeprefix("val/")])
        self.log(self.spec.best_key, self.val_best.compute().float())

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict:
        """:meth:`serve` with this task's ``predict_k`` and its trained history rule."""
        return self.serve(batch, self.predict_k, self.exclude_history)

    def serve(self, batch: dict[str, torch.Tensor], k: int, exclude_history: bool) -> dict:
        """Top-``k`` items per user, best first: ``user (B,)``, ``items (B, k)``,
        ``scores (B, k)``. With ``exclude_history`` the batch's ``seen`` items (the whole
        known history, in the serving stage) or else its window score ``-inf``; items at
        ``-inf`` (fewer than k rankable) are for the caller to drop. The rules come with the
        call, so one loaded model serves callers with different rules."""
        exclude = batch.get("seen", batch["items"]) if exclude_history else None
        scores = rankable_scores(self.score_next(batch), exclude)
        values, items = top_scored(scores, min(k, scores.shape[1] - 1))
        return {"user": batch["user"], "items": items, "scores": values}

    def configure_optimizers(self) -> Any:
        """The spec's optimiser, decaying weight matrices only, and its optional scheduler."""
        options = self.spec.optimizer
        groups = parameter_groups(self, options.weight_decay)
        optimizer = OPTIMIZERS[options.name](groups, lr=options.lr, fused=fusable(groups))
        schedule = self.spec.scheduler
        if schedule is None:
            return optimizer
        if schedule.name == "warmup_cosine":
            scheduler = {
                "scheduler": warmup_cosine(
                    optimizer, schedule, self.trainer.estimated_stepping_batches
                ),
                "interval": "step",
            }
        else:
            scheduler = {
                "scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(
                    optimizer,
                    mode="max",  # ranking metrics: higher is better
                    factor=schedule.factor,
                    patience=schedule.patience,
                ),
                "monitor": self.spec.optimized_metric,
            }
        return {"optimizer": optimizer, "lr_scheduler": scheduler}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        catalogue = None if self.catalogue is None else self.catalogue.record()
        checkpoint[RECORD_KEY] = checkpoint_record(
            self.spec, self.data_record, catalogue, self.rerank
        )


def warmup_cosine(
    optimizer: torch.optim.Optimizer, options: WarmupCosineOptions, total_steps: int | float
) -> torch.optim.lr_scheduler.LRScheduler:
    """Linear warm-up over ``options.warmup`` of ``total_steps``, then a cosine to
    ``options.min_lr_ratio`` of each group's lr at the last step."""
    if not math.isfinite(total_steps):
        raise OptionError(
            "model.scheduler warmup_cosine decays over the whole run: set trainer.max_epochs "
            "or trainer.max_steps."
        )
    total = max(int(total_steps), 2)
    warmup = max(int(options.warmup * total), 1)
    floor = options.min_lr_ratio

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        return floor + (1 - floor) * (1 + math.cos(math.pi * progress)) / 2

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


FUSED_DEVICES = ("cpu", "cuda")  # where torch has one-kernel Adam/AdamW updates


def fusable(groups: list[dict[str, Any]]) -> bool:
    """Whether every parameter can take torch's fused Adam/AdamW step: one kernel over all
    tensors, where the default loops over them in Python. The item table is most of the
    weights, and updating it dominates a small step: on a 2-core CPU, an 11k x 50 table and a
    2-block encoder step in 0.6 ms fused against 4.8 ms looped (docs/benchmarks.md)."""
    return all(
        p.device.type in FUSED_DEVICES and p.is_floating_point()
        for group in groups
        for p in group["params"]
    )


def parameter_groups(module: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two optimiser groups: weight matrices decayed, the rest not.

    Frozen parameters are left out. Biases, norm scales and activation slopes (vectors) only
    shift or scale, and lookup
    tables a part names in its ``no_weight_decay()`` (positions) are not transformations:
    decaying them pulls them towards zero for no regularising benefit. Item and side-feature
    embeddings are decayed: they are the model's capacity per item.
    """
    exempt: set[str] = set()
    for prefix, part in module.named_modules():
        if hasattr(part, "no_weight_decay"):
            exempt |= {f"{prefix}.{name}" if prefix else name for name in part.no_weight_decay()}
    decay, keep = [], []
    for name, parameter in module.named_parameters():
        if not parameter.requires_grad:
            continue  # a frozen part (a two-stage model's retriever) is not trained
        (keep if parameter.ndim < 2 or name in exempt else decay).append(parameter)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": keep, "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def last_position(
    states: torch.Tensor, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A batch with one target per window as a batch of one-event windows: the state at each
    window's last real event ``(B, 1, D)`` (gathered at ``lengths - 1``, never PAD) and its
    target as ``targets (B, 1)``, so every sequence loss trains it unchanged."""
    last = (batch["lengths"] - 1)[:, None, None].expand(-1, 1, states.shape[-1])  # (B, 1, D)
    ones = torch.ones_like(batch["lengths"])
    view = {"targets": batch["target"][:, None], "lengths": ones, "mask": ones[:, None].bool()}
    return states.gather(1, last), view
