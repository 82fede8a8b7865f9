"""Metrics of the held-out item among fixed sampled negatives (the SASRec and DIN papers'
protocol): a different, far easier quantity than all-item ranking, logged apart from it.

No beyond-accuracy metrics here (coverage, avg_pop, gini, tail_share): a top-K of a user's
1 + n candidates, drawn at random, says nothing about which of the catalogue's items the model
recommends. They are computed once, over the all-item ranking
(:mod:`recsys_seq.metrics.beyond_accuracy`), whichever protocol the accuracy uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from recsys_seq.metrics.auc import SampledAUC
from recsys_seq.metrics.ranking import RankingMetrics, target_rank


class SampledMetrics(nn.Module):
    """HR/NDCG/MRR@K of the target's rank among its candidates, plus AUC and GAUC.

    Args:
        ks: cut-offs.
        metric_options: torchmetrics options (e.g. ``sync_on_compute=False``).
    """

    def __init__(self, ks: Sequence[int], **metric_options) -> None:
        super().__init__()
        self.ranking = RankingMetrics(ks, **metric_options)
        self.auc = SampledAUC(**metric_options)

    def update(self, candidate_scores: torch.Tensor, weight: torch.Tensor) -> None:
        """Add a batch of users.

        Args:
            candidate_scores: ``(B, 1 + n)`` scores, the target's in column 0.
            weight: ``(B,)`` integer GAUC weight per user (e.g. events in the input window).
        """
        target = torch.zeros(candidate_scores.shape[0], dtype=torch.long, device=weight.device)
        self.ranking.update(target_rank(candidate_scores, target))
        self.auc.update(candidate_scores[:, 0], candidate_scores[:, 1:], weight=weight)

    def compute(self) -> dict[str, torch.Tensor]:
        return self.ranking.compute() | self.auc.compute()

    def reset(self) -> None:
        self.ranking.reset()
        self.auc.reset()
