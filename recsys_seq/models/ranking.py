"""Evaluation shared by every recommender: score all items, rank the held-out one, aggregate."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import lightning as L
import torch

from recsys_seq.metrics import RankingMetrics, SampledMetrics, target_rank
from recsys_seq.metrics.ranking import DEFAULT_KS


def rankable_scores(scores: torch.Tensor, exclude: torch.Tensor | None = None) -> torch.Tensor:
    """``(B, N + 1)`` scores in float32 with PAD and the ``exclude`` items ``(B, L)`` (0 for
    none) at ``-inf``: what evaluation ranks and serving recommends from."""
    scores = scores.float()
    pad = torch.zeros(1, dtype=torch.long, device=scores.device)
    scores = scores.index_fill(1, pad, float("-inf"))  # PAD is never a recommendation
    if exclude is not None:
        scores = scores.scatter(1, exclude, float("-inf"))  # PAD slots hit column 0
    return scores


class RankingModule(L.LightningModule):
    """Validation and test for next-item ranking against the full catalogue, plus sampled
    metrics when the evaluation batches carry fixed ``negatives``.

    Subclasses implement :meth:`score_next`. Metrics are logged as ``<prefix><stage>/<name>``,
    e.g. ``val/ndcg@10`` or ``popularity/test/hr@10``.

    Args:
        ks: metric cut-offs.
        exclude_history: score items of the input window ``-inf`` so they cannot be
            recommended again (a target that is in the window can then never be a hit).
        sampled_negatives: fixed negatives per user in the evaluation data (0: none). Known
            up front, the same on every rank, because logging the sampled metrics is a
            collective step that every rank must take, whether or not it saw a batch.
        metric_prefix: prepended to every logged key (e.g. ``"popularity/"``).
        progress_metric: the logged key also shown in the progress bar (e.g. ``val/ndcg@10``).
    """

    def __init__(
        self,
        ks: Sequence[int] = DEFAULT_KS,
        exclude_history: bool = False,
        sampled_negatives: int = 0,
        metric_prefix: str = "",
        progress_metric: str | None = None,
    ) -> None:
        super().__init__()
        self.progress_metric = progress_metric
        self.exclude_history = exclude_history
        self.sampled_negatives = sampled_negatives
        self.metric_prefix = metric_prefix
        self.val_metrics = RankingMetrics(ks)
        self.test_metrics = RankingMetrics(ks)
        self.val_sampled = SampledMetrics(ks)
        self.test_sampled = SampledMetrics(ks)

    def score_next(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(B, N + 1)`` scores of every item as the next event after each input window."""
        raise NotImplementedError

    def ranking_scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """:meth:`score_next` through :func:`rankable_scores` (the window excluded when
        ``exclude_history``)."""
        exclude = batch["items"] if self.exclude_history else None
        return rankable_scores(self.score_next(batch), exclude)

    def _update(
        self, batch: dict[str, torch.Tensor], full: RankingMetrics, sampled: SampledMetrics
    ) -> None:
        scores = self.ranking_scores(batch)  # (B, N + 1)
        full.update(target_rank(scores, batch["target"]))
        if "negatives" in batch:
            candidates = torch.cat([batch["target"][:, None], batch["negatives"]], 1)
            sampled.update(scores.gather(1, candidates), weight=batch["lengths"])

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._update(batch, self.val_metrics, self.val_sampled)

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._update(batch, self.test_metrics, self.test_sampled)

    def _keys(self, stage: str, values: dict[str, torch.Tensor], sampled: int = 0) -> dict:
        """``<prefix><stage>/<metric>@<k>``, or ``.../sampled<n>/...`` for sampled metrics."""
        name = f"{self.metric_prefix}{stage}" + (f"/sampled{sampled}" if sampled else "")
        return {f"{name}/{k}": v.float() for k, v in values.items()}

    def _log_stage(
        self, stage: str, full: RankingMetrics, sampled: SampledMetrics
    ) -> dict[str, torch.Tensor]:
        """Log (and reset) one stage's metrics; returns the all-item values."""
        if self.sampled_negatives:
            self.log_dict(self._keys(stage, sampled.compute(), sampled=self.sampled_negatives))
            sampled.reset()
        values = full.compute()  # synced across ranks: sums and counts, then means
        full.reset()
        logged = self._keys(stage, values)
        shown = logged.pop(self.progress_metric, None)
        self.log_dict(logged)
        if shown is not None:
            self.log(self.progress_metric, shown, prog_bar=True)
        return values

    def on_validation_epoch_end(self) -> None:
        self._log_stage("val", self.val_metrics, self.val_sampled)

    def on_test_epoch_end(self) -> None:
        self._log_stage("test", self.test_metrics, self.test_sampled)

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
