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

Negatives come from :func:`sampled_negatives`, a counter-based generator keyed by a fixed seed,
the user index and the draw number: every model, batch layout, device and process count sees
the same candidates for the same user.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric

_MASK32 = 0xFFFFFFFF


def _mulmod32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """``(x * constant) mod 2**32`` for int64 ``x`` in ``[0, 2**32)`` without int64 overflow."""
    high, low = constant >> 16, constant & 0xFFFF
    return ((x * low) + (((x * high) & 0xFFFF) << 16)) & _MASK32  # each product < 2**48


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (Wellons' lowbias32) on int64 tensors holding ``[0, 2**32)``."""
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = _mulmod32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mulmod32(x, 0x846CA68B)
    return x ^ (x >> 16)


def sampled_negatives(
    user: torch.Tensor, positive: torch.Tensor, num_items: int, num_negatives: int, seed: int = 0
) -> torch.Tensor:
    """Negative items per user, fixed by ``(seed, user)``, never PAD and never the positive.

    Draw ``j`` of user ``u`` is ``hash(hash(hash(seed) + u) + j)`` mapped onto the ``N - 1``
    real items other than the positive (uniform, with replacement). A pure function of its
    inputs, so it needs no generator state and gives the same items on every device.

    Args:
        user: ``(B,)`` long user indices.
        positive: ``(B,)`` long held-out items in ``1..N``.
        num_items: N (needs ``2 <= N < 2**31``).
        num_negatives: n, draws per user.
        seed: fixes the candidate set of the whole evaluation.

    Returns:
        ``(B, n)`` long items in ``1..N``, each different from its row's positive.
    """
    if not 2 <= num_items < 2**31:
        raise ValueError(f"sampled negatives need 2 <= num_items < 2**31, got {num_items}")
    user = user.long()
    draw = torch.arange(num_negatives, device=user.device)  # (n,)
    key = _mix32(torch.full_like(user, seed)) + user  # (B,)
    bits = _mix32(_mix32(key)[:, None] + draw)  # (B, n) uniform in [0, 2**32)
    other = 1 + ((bits * (num_items - 1)) >> 32)  # (B, n) in 1..N-1; product < 2**63
    return other + (other >= positive[:, None]).long()  # skip the positive: 1..N without it


class SampledAUC(Metric):
    """AUC and GAUC of one positive against ``num_negatives`` sampled negatives per user.

    Args:
        num_negatives: n, the negatives per user every update must carry.
    """

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, num_negatives: int = 100, **kwargs) -> None:
        super().__init__(**kwargs)
        if num_negatives < 1:
            raise ValueError(f"num_negatives must be >= 1, got {num_negatives}")
        self.num_negatives = num_negatives
        zero = torch.zeros((), dtype=torch.long)
        # 2 x concordant pairs (a tie adds 1), summed over users, and weighted by w_u
        self.add_state("concordant2", default=zero.clone(), dist_reduce_fx="sum")
        self.add_state("weighted_concordant2", default=zero.clone(), dist_reduce_fx="sum")
        self.add_state("weight", default=zero.clone(), dist_reduce_fx="sum")
        self.add_state("users", default=zero.clone(), dist_reduce_fx="sum")

    def update(
        self, positive: torch.Tensor, negatives: torch.Tensor, weight: torch.Tensor | None = None
    ) -> None:
        """Add a batch of users.

        Args:
            positive: ``(B,)`` scores of each user's held-out item.
            negatives: ``(B, n)`` scores of the user's sampled negatives.
            weight: ``(B,)`` integer GAUC weight per user (events); None weighs users equally.
        """
        if negatives.shape[1] != self.num_negatives:
            raise ValueError(
                f"expected {self.num_negatives} negatives per user, got {negatives.shape[1]}"
            )
        pos = positive[:, None]  # (B, 1)
        concordant2 = 2 * (negatives < pos).sum(1) + (negatives == pos).sum(1)  # (B,)
        weight = torch.ones_like(concordant2) if weight is None else weight.long()
        self.concordant2 += concordant2.sum()
        self.weighted_concordant2 += (weight * concordant2).sum()
        self.weight += weight.sum()
        self.users += positive.shape[0]

    def compute(self) -> dict[str, torch.Tensor]:
        """``{"auc": ..., "gauc": ...}`` as float64 (0 before any user)."""
        pairs2 = 2.0 * self.num_negatives
        users = self.users.clamp(min=1).double()
        weight = self.weight.clamp(min=1).double()
        return {
            "auc": self.concordant2.double() / (pairs2 * users),
            "gauc": self.weighted_concordant2.double() / (pairs2 * weight),
        }
