"""Sampled-candidate AUC and GAUC (the DIN paper's protocol), exact under DDP.

Each user's held-out item (the positive) is scored against ``n`` sampled negative items:

* ``auc_u`` = the fraction of the user's negatives scored below the positive, a tie counting
  1/2 (the Mann-Whitney statistic for one positive).
* **AUC** = over all (positive, negative) pairs of all users: the correctly ordered pairs
  divided by the pairs. With the same ``n`` for every user this is the mean of ``auc_u``.
  Pairs never mix users: a positive is only compared with its own user's negatives.
* **GAUC** = ``sum_u w_u auc_u / sum_u w_u`` with ``w_u`` = the number of events in the user's
  input window (the events the model read, at most ``max_len``). The paper weights by
  impressions or clicks; with exactly ``1 + n`` impressions per user that weight would make
  GAUC equal AUC, so the user's event count stands in for activity here.

States are integer sums (twice the concordant pairs, so that ties stay integers) and counts,
summed across processes: the result does not depend on how users are split between ranks or
batches, to the last bit.

Negatives are the evaluation batch's fixed ``negatives`` (:mod:`recsys_seq.data.negatives`):
drawn once per dataset and seed, outside each user's history, the same for every model.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric


class SampledAUC(Metric):
    """AUC and GAUC of one positive against its user's sampled negatives."""

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        zero = torch.zeros((), dtype=torch.long)
        # 2 x concordant pairs (a tie adds 1) and pairs, plain and weighted by w_u
        self.add_state("concordant2", default=zero.clone(), dist_reduce_fx="sum")
        self.add_state("pairs", default=zero.clone(), dist_reduce_fx="sum")
        self.add_state("weighted_concordant2", default=zero.clone(), dist_reduce_fx="sum")
        self.add_state("weighted_pairs", default=zero.clone(), dist_reduce_fx="sum")

    def update(
        self,
        positive: torch.Tensor,
        negatives: torch.Tensor,
        weight: torch.Tensor | None = None,
        valid: torch.Tensor | None = None,
    ) -> None:
        """Add a batch of users.

        Args:
            positive: ``(B,)`` scores of each user's held-out item.
            negatives: ``(B, n)`` scores of the user's sampled negatives.
            weight: ``(B,)`` integer GAUC weight per user (events); None weighs users equally.
            valid: ``(B, n)`` bool, the negatives that count (None: all); a row with none
                adds no pair, so users are left out without a data-dependent shape.
        """
        pos = positive[:, None]  # (B, 1)
        if valid is None:
            valid = torch.ones_like(negatives, dtype=torch.bool)
        concordant2 = 2 * ((negatives < pos) & valid).sum(1) + ((negatives == pos) & valid).sum(1)
        pairs = valid.sum(1)  # (B,)
        weight = torch.ones_like(concordant2) if weight is None else weight.long()
        self.concordant2 += concordant2.sum()
        self.pairs += pairs.sum()
        self.weighted_concordant2 += (weight * concordant2).sum()
        self.weighted_pairs += (weight * pairs).sum()

    def compute(self) -> dict[str, torch.Tensor]:
        """``{"auc": ..., "gauc": ...}`` as float64 (0 before any user)."""
        return {
            "auc": self.concordant2.double() / (2.0 * self.pairs.clamp(min=1).double()),
            "gauc": self.weighted_concordant2.double()
            / (2.0 * self.weighted_pairs.clamp(min=1).double()),
        }
