"""Evaluation shared by every recommender: score all items, rank the held-out one, aggregate."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import lightning as L
import torch
from torch import nn
from torchmetrics import MaxMetric

from recsys_seq.metrics import RankingMetrics, SampledAUC, target_rank
from recsys_seq.metrics.ranking import DEFAULT_KS

MONITOR = "ndcg@10"
"""The validation metric checkpoints and sweeps optimise (logged as ``val/ndcg@10``)."""


class SampledMetrics(nn.Module):
    """Ranking metrics and AUC/GAUC of the target among the batch's fixed sampled negatives.

    A different quantity from all-item ranking (far easier); logged under ``sampled<n>/``.
    GAUC weights each user by the events in their input window (see :class:`SampledAUC`).
    """

    def __init__(self, ks: Sequence[int], **metric_options) -> None:
        super().__init__()
        self.ranking = RankingMetrics(ks, **metric_options)
        self.auc = SampledAUC(**metric_options)

    def update(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        candidates = torch.cat([batch["target"][:, None], batch["negatives"]], 1)  # (B, 1 + n)
        candidate_scores = scores.gather(1, candidates)  # target in column 0
        self.ranking.update(target_rank(candidate_scores, torch.zeros_like(batch["target"])))
        self.auc.update(candidate_scores[:, 0], candidate_scores[:, 1:], weight=batch["lengths"])

    def compute(self) -> dict[str, torch.Tensor]:
        return self.ranking.compute() | self.auc.compute()

    def reset(self) -> None:
        self.ranking.reset()
        self.auc.reset()


class RankingModule(L.LightningModule):
    """Validation and test for next-item ranking against the full catalogue, plus sampled
    metrics when the evaluation batches carry fixed ``negatives``.

    Subclasses implement :meth:`score_next`. Metrics are logged as ``<prefix><stage>/<name>``,
    e.g. ``val/ndcg@10`` or ``popularity/test/hr@10``.

    Args:
        ks: metric cut-offs.
        exclude_history: score items of the input window ``-inf`` so they cannot be
            recommended again (a target that is in the window can then never be a hit).
        metric_prefix: prepended to every logged key (e.g. ``"popularity/"``).
    """

    def __init__(
        self,
        ks: Sequence[int] = DEFAULT_KS,
        exclude_history: bool = False,
        metric_prefix: str = "",
    ) -> None:
        super().__init__()
        self.exclude_history = exclude_history
        self.metric_prefix = metric_prefix
        self.val_metrics = RankingMetrics(ks)
        self.test_metrics = RankingMetrics(ks)
        # against the batch's fixed sampled negatives, when the data provides them
        self.val_sampled = SampledMetrics(ks)
        self.test_sampled = SampledMetrics(ks)
        self.val_best = MaxMetric()
        self.optimizer_factory = torch.optim.AdamW
        self.scheduler_factory = None
        self.spec = None  # the checked ModelSpec this model was built from (models/registry)

    def score_next(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(B, N + 1)`` scores of every item as the next event after each input window."""
        raise NotImplementedError

    def ranking_scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """:meth:`score_next` in float32 with PAD (and optionally the history) at ``-inf``."""
        scores = self.score_next(batch).float()
        pad = torch.zeros(1, dtype=torch.long, device=scores.device)
        scores = scores.index_fill(1, pad, float("-inf"))  # PAD is never a recommendation
        if self.exclude_history:
            scores = scores.scatter(1, batch["items"], float("-inf"))  # PAD slots hit column 0
        return scores

    def _update(
        self, batch: dict[str, torch.Tensor], full: RankingMetrics, sampled: SampledMetrics
    ) -> None:
        scores = self.ranking_scores(batch)  # (B, N + 1)
        full.update(target_rank(scores, batch["target"]))
        if "negatives" in batch:
            sampled.update(scores, batch)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._update(batch, self.val_metrics, self.val_sampled)

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._update(batch, self.test_metrics, self.test_sampled)

    def _keys(self, stage: str, values: dict[str, torch.Tensor], sampled: int = 0) -> dict:
        """``<prefix><stage>/<metric>@<k>``, or ``.../sampled<n>/...`` for sampled metrics."""
        name = f"{self.metric_prefix}{stage}" + (f"/sampled{sampled}" if sampled else "")
        return {f"{name}/{k}": v.float() for k, v in values.items()}

    def _log_stage(self, stage: str, metrics: RankingMetrics) -> dict[str, torch.Tensor]:
        values = metrics.compute()  # synced across ranks: sums and counts, then means
        metrics.reset()
        self.log_dict(self._keys(stage, values))
        return values

    def _log_sampled(self, stage: str, sampled: SampledMetrics) -> None:
        # Decided from the data config, identical on every rank (compute() is collective),
        # not from whether this rank happened to see a batch.
        n = getattr(self.trainer.datamodule, "sampled_negatives", 0)
        if n:
            self.log_dict(self._keys(stage, sampled.compute(), sampled=n))
            sampled.reset()

    @torch.no_grad()
    def evaluate(self, dataloader: Iterable[dict[str, torch.Tensor]], stage: str) -> dict:
        """Metrics over a whole loader in this process, without a Trainer (for baselines
        and scripts); the same keys and code as validation/test."""
        self.eval()
        # this process's users only, even inside a DDP job (rank zero runs the baselines)
        local = {"sync_on_compute": False}
        ks = self.val_metrics.ks
        full, sampled = RankingMetrics(ks, **local), SampledMetrics(ks, **local)
        negatives = 0
        for batch in dataloader:
            self._update(batch, full, sampled)
            negatives = batch["negatives"].shape[1] if "negatives" in batch else 0
        values = self._keys(stage, full.compute())
        if negatives:
            values |= self._keys(stage, sampled.compute(), sampled=negatives)
        return {k: float(v) for k, v in values.items()}

    def on_validation_epoch_end(self) -> None:
        self._log_sampled("val", self.val_sampled)
        values = self._log_stage("val", self.val_metrics)
        if self.trainer.sanity_checking:
            return
        self.val_best(values[MONITOR])
        self.log(f"{self.metric_prefix}val/best_{MONITOR}", self.val_best.compute().float())

    def configure_optimizers(self) -> Any:
        """The ``optimizer`` partial over all parameters, and the optional ``scheduler``
        partial monitoring validation NDCG@10 (set by trainable subclasses)."""
        optimizer = self.optimizer_factory(params=self.parameters())
        if self.scheduler_factory is None:
            return optimizer
        return {
            "optimizer": optimizer,
            "lr_scheduler": {
                "scheduler": self.scheduler_factory(optimizer=optimizer),
                "monitor": f"val/{MONITOR}",
            },
        }

    def on_test_epoch_end(self) -> None:
        self._log_sampled("test", self.test_sampled)
        self._log_stage("test", self.test_metrics)
