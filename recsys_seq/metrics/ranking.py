"""Next-item ranking metrics: HR@K, NDCG@K and MRR@K for one held-out target per user.

Evaluation ranks the target against every candidate the model scored (all items by default).
The rank is computed once per user and every metric is a function of it, so all metrics agree
on what "rank" means:

* ``rank`` is 0-based: 0 means the target has the highest score.
* Ties are counted pessimistically: every other candidate whose score equals the target's is
  ranked above it. A model that scores everything equally therefore gets rank N-1, not a lucky
  rank 0, and a tie never flatters a model.
* Candidates scored ``-inf`` (PAD, excluded history items) rank below everything, including a
  target that was itself excluded (which can then never be a hit).

With one target per user: HR@K = Recall@K = [rank < K], NDCG@K = [rank < K] / log2(rank + 2),
MRR@K = [rank < K] / (rank + 1).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torchmetrics import Metric

DEFAULT_KS = (1, 5, 10, 20)


def nan_as_lowest(scores: torch.Tensor) -> torch.Tensor:
    """``scores`` with every NaN at ``-inf`` (and ``-0.0`` as ``0.0``, which it equals): a
    diverged model's NaN compares false with everything, so a NaN target would count nobody
    above it (rank 0: a hit at every K, NDCG 1/log2(1) = inf, a "best" checkpoint) and a NaN
    item would never be outranked. As ``-inf`` it ranks last, tied with PAD and the excluded
    items, and is never recommended."""
    return scores.nan_to_num(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf")).add_(0.0)


def target_rank(scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Pessimistic 0-based rank of each row's target among that row's scores.

    Args:
        scores: ``(B, C)`` float scores over C candidates; NaN ranks as ``-inf``.
        target: ``(B,)`` long column index of the target in ``scores``.

    Returns:
        ``(B,)`` long: the number of other candidates scoring at least as high as the target.
    """
    scores = nan_as_lowest(scores)
    target_score = scores.gather(1, target[:, None])  # (B, 1)
    at_least_as_high = (scores >= target_score).sum(dim=1)  # (B,) includes the target itself
    return at_least_as_high - 1


class RankingMetrics(Metric):
    """HR@K, NDCG@K and MRR@K from target ranks, accumulated as sums and a user count.

    States are summed across processes, so the result under DDP equals a single-process run on
    the same users (as long as each user is evaluated exactly once, which the samplers ensure).

    Args:
        ks: cut-offs, e.g. ``(1, 5, 10, 20)``.
    """

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, ks: Sequence[int] = DEFAULT_KS, **kwargs) -> None:
        super().__init__(**kwargs)
        if not ks or min(ks) < 1:
            raise ValueError(f"ks must be positive cut-offs, got {list(ks)}")
        self.ks = tuple(sorted(set(int(k) for k in ks)))
        n = len(self.ks)
        self.add_state("hits", default=torch.zeros(n, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("ndcg", default=torch.zeros(n, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("rr", default=torch.zeros(n, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("users", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, rank: torch.Tensor) -> None:
        """Add a batch of users.

        Args:
            rank: ``(B,)`` 0-based target ranks from :func:`target_rank`.
        """
        rank = rank.to(torch.float64)[:, None]  # (B, 1)
        cutoffs = torch.tensor(self.ks, dtype=torch.float64, device=rank.device)  # (n,)
        hit = rank < cutoffs  # (B, n)
        self.hits += hit.sum(0)
        self.ndcg += torch.where(hit, 1.0 / torch.log2(rank + 2.0), 0.0).sum(0)
        self.rr += torch.where(hit, 1.0 / (rank + 1.0), 0.0).sum(0)
        self.users += rank.shape[0]

    def compute(self) -> dict[str, torch.Tensor]:
        """Means over users, keyed ``hr@K``, ``ndcg@K``, ``mrr@K``."""
        users = self.users.clamp(min=1).to(torch.float64)
        out: dict[str, torch.Tensor] = {}
        for i, k in enumerate(self.ks):
            out[f"hr@{k}"] = self.hits[i] / users
            out[f"ndcg@{k}"] = self.ndcg[i] / users
            out[f"mrr@{k}"] = self.rr[i] / users
        return out
