"""Beyond-accuracy metrics of the top-K lists a model recommends: item coverage, average
recommendation popularity, the Gini index of the recommendations and the long-tail share.

HR and NDCG ask whether each user's held-out item is near the top; these ask what the lists
are as a whole: how much of the catalogue they use and how much they lean on what was already
popular in training. A model can gain accuracy by showing everyone the same best-sellers;
these figures show it (the popularity baseline does exactly that).

For a cut-off K: the catalogue is items ``1..N`` (never PAD); user u's list ``L_u`` is its
best ``min(K, rankable)`` items (:func:`~recsys_seq.metrics.top_k.top_items`: items at
``-inf``, PAD and an excluded history, are never in it, so a user with fewer than K rankable
items gets a shorter list); ``c_i`` is item i's training count and ``r_i`` the number of lists
holding it, over the evaluated users.

* ``coverage@K`` = ``|{i : r_i > 0}| / N``: the share of the catalogue in at least one list.
* ``avg_pop@K`` = ``mean_u mean_{i in L_u} c_i``: the average recommendation popularity
  (ARP, Abdollahpouri et al.) in raw training counts, as that literature reports it: "the
  lists' items were bought 412 times on average" reads directly against the data, and the
  results table sets it beside the popularity baseline's. Users with an empty list are left
  out.
* ``gini@K`` = ``sum_j (2j - N - 1) r_(j) / (N sum_j r_j)`` over all N items, ``r`` sorted
  ascending (never recommended: 0): 0 when every item is recommended equally often,
  ``(N - 1) / N`` when one item fills every slot; 0 with no recommendation at all.
* ``tail_share@K`` = ``sum_{i in tail} r_i / sum_i r_i``: the share of recommended slots
  held by long-tail items (:func:`long_tail`: the items outside the short head that holds
  80% of the training events).

The states are per-item recommendation counts and per-user sums, summed across processes
(never sets of items), so the result under DDP equals one process on the same users, as long
as each user is evaluated once (the samplers see to that). They cover all-item rankings only:
a top-K of a user's 1 + n sampled candidates says nothing about the catalogue
(:mod:`recsys_seq.metrics.sampled`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torchmetrics import Metric

from recsys_seq.optimized_metric import BEYOND_ACCURACY

HEAD_SHARE = 0.8  # the short head: the most popular items holding 80% of training events


def long_tail(item_counts: torch.Tensor, head_share: float = HEAD_SHARE) -> torch.Tensor:
    """``(N + 1,)`` bool: True for the catalogue's long-tail items, False for the head and PAD.

    The head (short head) is every item whose training count is at least ``c*``, the count at
    which the most popular items, taken in order, first reach ``head_share`` of the training
    events; the tail is the rest, items never seen in training included, and together holds
    at most ``1 - head_share`` of the events. Items tied at ``c*`` are all head, so the split
    does not depend on item order. (The 80/20 split of the popularity-bias literature, as
    Elliot's long-tail metrics draw it.)

    Args:
        item_counts: ``(N + 1,)`` training counts per item index (index 0 is PAD).
        head_share: the share of training events the head holds.
    """
    counts = item_counts[1:].to(torch.float64)  # (N,)
    ordered = counts.sort(descending=True).values
    reached = ordered.cumsum(0) >= head_share * counts.sum()
    threshold = ordered[reached.to(torch.uint8).argmax()]  # c*: the first count that reaches it
    head = (counts >= threshold) & (counts > 0)
    return torch.cat([torch.zeros(1, dtype=torch.bool), ~head])


def gini(counts: torch.Tensor) -> torch.Tensor:
    """``(n,)`` Gini index of each row of ``counts (n, N)`` (non-negative), 0 for a zero row."""
    ordered = counts.to(torch.float64).sort(dim=1).values  # (n, N) ascending
    items = counts.shape[1]
    rank = torch.arange(1, items + 1, dtype=torch.float64, device=counts.device)  # (N,)
    total = ordered.sum(1)  # (n,)
    return (ordered @ (2 * rank - items - 1)) / (items * total).clamp(min=1)


class BeyondAccuracyMetrics(Metric):
    """Coverage, average popularity, Gini and long-tail share at each cut-off (module doc).

    Args:
        item_counts: ``(N + 1,)`` training counts per item index (index 0 is PAD).
        ks: cut-offs, e.g. ``(1, 5, 10, 20)``.
        head_share: the share of training events the short head holds (:func:`long_tail`).
        kwargs: torchmetrics options (e.g. ``sync_on_compute=False``).
    """

    full_state_update = False
    is_differentiable = False

    def __init__(
        self,
        item_counts: np.ndarray | torch.Tensor,
        ks: Sequence[int],
        head_share: float = HEAD_SHARE,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if not ks or min(ks) < 1:
            raise ValueError(f"ks must be positive cut-offs, got {list(ks)}")
        self.ks = tuple(sorted(set(int(k) for k in ks)))
        counts = torch.as_tensor(np.asarray(item_counts), dtype=torch.float64)  # (N + 1,)
        # catalogue facts: moved with the module, never saved in a checkpoint
        self.register_buffer("popularity", counts, persistent=False)
        self.register_buffer("tail", long_tail(counts, head_share), persistent=False)
        n, items = len(self.ks), counts.shape[0] - 1
        self.add_state(
            "recommended", default=torch.zeros(n, items, dtype=torch.long), dist_reduce_fx="sum"
        )  # (n, N): lists holding each item, per cut-off
        self.add_state(
            "mean_popularity", default=torch.zeros(n, dtype=torch.float64), dist_reduce_fx="sum"
        )  # (n,): sum over users of their list's mean training count
        self.add_state("users", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    @property
    def max_k(self) -> int:
        """The longest list the cut-offs read."""
        return self.ks[-1]

    def update(self, items: torch.Tensor, valid: torch.Tensor) -> None:
        """Add a batch of users' lists, best first.

        Args:
            items: ``(B, W)`` item indices; cut-off K reads the first ``min(K, W)``.
            valid: ``(B, W)`` False for an empty slot (no rankable item left), those last.
        """
        # catalogue item i is column i - 1; an empty slot adds 0 (bincount would size its
        # output from the batch's largest index: a host-device sync per batch)
        column = (items - 1).clamp(min=0)  # (B, W)
        counted = valid.long()  # (B, W)
        popularity = torch.where(valid, self.popularity[items], 0.0)  # (B, W)
        for i, k in enumerate(self.ks):  # a few cut-offs, each over the whole batch
            self.recommended[i].scatter_add_(0, column[:, :k].flatten(), counted[:, :k].flatten())
            length = counted[:, :k].sum(1)  # (B,)
            self.mean_popularity[i] += (popularity[:, :k].sum(1) / length.clamp(min=1)).sum()
        self.users += valid.any(1).sum()

    def compute(self) -> dict[str, torch.Tensor]:
        """Keyed ``coverage@K``, ``avg_pop@K``, ``gini@K``, ``tail_share@K``."""
        recommended = self.recommended.to(torch.float64)  # (n, N)
        coverage = (recommended > 0).sum(1).to(torch.float64) / recommended.shape[1]
        slots = recommended.sum(1).clamp(min=1)
        tail_share = (recommended * self.tail[1:]).sum(1) / slots
        avg_pop = self.mean_popularity / self.users.clamp(min=1)
        values = (coverage, avg_pop, gini(recommended), tail_share)  # (n,) each
        named = dict(zip(BEYOND_ACCURACY, values, strict=True))
        return {f"{name}@{k}": v[i] for i, k in enumerate(self.ks) for name, v in named.items()}
