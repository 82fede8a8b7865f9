"""Evaluation shared by every recommender: score all items, rank the held-out one, aggregate."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import lightning as L
import numpy as np
import torch

from recsys_seq.metrics import (
    BeyondAccuracyMetrics,
    RankingMetrics,
    SampledMetrics,
    nan_as_lowest,
    target_rank,
    top_items,
)
from recsys_seq.metrics.ranking import DEFAULT_KS


def rankable_scores(scores: torch.Tensor, exclude: torch.Tensor | None = None) -> torch.Tensor:
    """``(B, N + 1)`` scores in float32 with PAD, the ``exclude`` items ``(B, L)`` (0 for
    none) and NaN (:func:`~recsys_seq.metrics.nan_as_lowest`) at ``-inf``: what evaluation
    ranks and serving recommends from."""
    scores = nan_as_lowest(scores.float())  # a copy: the rest may write in place
    scores[:, 0] = float("-inf")  # PAD is never a recommendation
    if exclude is not None:
        scores.scatter_(1, exclude, float("-inf"))  # PAD slots hit column 0
    return scores


class RankingModule(L.LightningModule):
    """Validation and test for next-item ranking against the full catalogue, plus sampled
    metrics when the evaluation batches carry fixed ``negatives``, plus the beyond-accuracy
    metrics of the all-item top-K lists when the training counts are known.

    Subclasses implement :meth:`score_next`. Metrics are logged as ``<prefix><stage>/<name>``,
    e.g. ``val/ndcg@10``, ``popularity/test/hr@10`` or ``test/coverage@10``.

    Args:
        ks: metric cut-offs.
        exclude_history: score items of the input window ``-inf`` so they cannot be
            recommended again (a target that is in the window can then never be a hit).
        sampled_negatives: fixed negatives per user in the evaluation data (0: none). Known
            up front, the same on every rank, because logging the sampled metrics is a
            collective step that every rank must take, whether or not it saw a batch.
        metric_prefix: prepended to every logged key (e.g. ``"popularity/"``).
        progress_metric: the logged key also shown in the progress bar (e.g. ``val/ndcg@10``).
        item_counts: ``(N + 1,)`` training counts per item index, for the beyond-accuracy
            metrics (:class:`BeyondAccuracyMetrics`); None (a model built to serve): none.
    """

    def __init__(
        self,
        ks: Sequence[int] = DEFAULT_KS,
        exclude_history: bool = False,
        sampled_negatives: int = 0,
        metric_prefix: str = "",
        progress_metric: str | None = None,
        item_counts: np.ndarray | torch.Tensor | None = None,
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
        self._item_counts = item_counts
        self.val_beyond = self.beyond_accuracy()
        self.test_beyond = self.beyond_accuracy()

    def beyond_accuracy(self, **metric_options) -> BeyondAccuracyMetrics | None:
        """Fresh beyond-accuracy metrics at this module's cut-offs (None without training
        counts); ``metric_options`` as for torchmetrics (``sync_on_compute=False``)."""
        if self._item_counts is None:
            return None
        return BeyondAccuracyMetrics(self._item_counts, self.val_metrics.ks, **metric_options)

    def stage_metrics(
        self, stage: str
    ) -> tuple[RankingMetrics, SampledMetrics, BeyondAccuracyMetrics | None]:
        """``(all-item, sampled, beyond-accuracy)`` metrics of ``stage`` (``val`` or ``test``)."""
        if stage == "val":
            return self.val_metrics, self.val_sampled, self.val_beyond
        return self.test_metrics, self.test_sampled, self.test_beyond

    def score_next(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(B, N + 1)`` scores of every item as the next event after each input window."""
        raise NotImplementedError

    def ranking_scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """:meth:`score_next` through :func:`rankable_scores` (the window excluded when
        ``exclude_history``)."""
        exclude = batch["items"] if self.exclude_history else None
        return rankable_scores(self.score_next(batch), exclude)

    def _update(
        self,
        batch: dict[str, torch.Tensor],
        full: RankingMetrics,
        sampled: SampledMetrics,
        beyond: BeyondAccuracyMetrics | None,
    ) -> None:
        scores = self.ranking_scores(batch)  # (B, N + 1)
        full.update(target_rank(scores, batch["target"]))
        if beyond is not None:  # the lists the ranking metrics rank in: PAD, history -inf
            beyond.update(*top_items(scores, beyond.max_k))
        if "negatives" in batch:
            candidates = torch.cat([batch["target"][:, None], batch["negatives"]], 1)
            sampled.update(scores.gather(1, candidates), weight=batch["lengths"])

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._update(batch, *self.stage_metrics("val"))

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._update(batch, *self.stage_metrics("test"))

    def _keys(self, stage: str, values: dict[str, torch.Tensor], sampled: int = 0) -> dict:
        """``<prefix><stage>/<metric>@<k>``, or ``.../sampled<n>/...`` for sampled metrics."""
        name = f"{self.metric_prefix}{stage}" + (f"/sampled{sampled}" if sampled else "")
        return {f"{name}/{k}": v.float() for k, v in values.items()}

    def _log_stage(self, stage: str) -> dict[str, torch.Tensor]:
        """Log (and reset) one stage's metrics; returns the all-item ranking values."""
        full, sampled, beyond = self.stage_metrics(stage)
        if self.sampled_negatives:
            self.log_dict(self._keys(stage, sampled.compute(), sampled=self.sampled_negatives))
            sampled.reset()
        if beyond is not None:
            self.log_dict(self._keys(stage, beyond.compute()))
            beyond.reset()
        values = full.compute()  # synced across ranks: sums and counts, then means
        full.reset()
        logged = self._keys(stage, values)
        shown = logged.pop(self.progress_metric, None)
        self.log_dict(logged)
        if shown is not None:
            self.log(self.progress_metric, shown, prog_bar=True)
        return values

    def on_validation_epoch_end(self) -> None:
        self._log_stage("val")

    def on_test_epoch_end(self) -> None:
        self._log_stage("test")

    @torch.no_grad()
    def evaluate(self, dataloader: Iterable[dict[str, torch.Tensor]], stage: str) -> dict:
        """Metrics over a whole loader in this process, without a Trainer (for baselines
        and scripts); the same keys and code as validation/test."""
        self.eval()
        # this process's users only, even inside a DDP job (rank zero runs the baselines)
        local = {"sync_on_compute": False}
        ks = self.val_metrics.ks
        full, sampled = RankingMetrics(ks, **local), SampledMetrics(ks, **local)
        beyond = self.beyond_accuracy(**local)
        negatives = 0
        for batch in dataloader:
            self._update(batch, full, sampled, beyond)
            negatives = batch["negatives"].shape[1] if "negatives" in batch else 0
        values = self._keys(stage, full.compute())
        if beyond is not None:
            values |= self._keys(stage, beyond.compute())
        if negatives:
            values |= self._keys(stage, sampled.compute(), sampled=negatives)
        return {k: float(v) for k, v in values.items()}
