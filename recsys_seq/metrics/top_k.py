"""Each user's top-K list, as the beyond-accuracy metrics read it, a two-stage pipeline takes
its candidates and a model serves: the first K of a stable descending sort of the scores
(equal scores towards the lower item index), on device, without a host sync.

``torch.topk`` alone leaves the order of equal scores to its kernel, which differs between
CPU and GPU and depends on the batch's shape (on CPU, the same row picks other tied items in
a batch of 1 and in a batch of 64). For ranking metrics that is harmless (the target's rank
counts ties pessimistically), but which items fill a list decides coverage and Gini, which
candidates a ranker sees and what a user is served: a user's list would change with its
batch mates, and evaluation under DDP (other batch mates) would differ from one process. The
popularity baseline scores many items exactly alike (the same training count), and so does a
model at low precision.

The values of ``torch.topk`` are exact whatever the kernel; only which of several equal
items it returns, and in which order, are the kernel's. So its K-th value is a sure
threshold: every item above it is in the list, the seats left go to the tied items of lowest
index (a second ``topk``, of distinct column numbers), and the K chosen items are sorted by
column, then stably by score. That costs about three plain ``topk`` of the same scores
(as much as one ``topk`` over 64-bit keys of score and column), and every step is
traceable, so exported programs rank the same way.
"""

from __future__ import annotations

import torch

from recsys_seq.metrics.ranking import nan_as_lowest


def top_scored(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk(scores, k, dim=1)`` with equal scores in column order: ``(values, items)``,
    each ``(B, min(k, C))``, best first.

    Args:
        scores: ``(B, C)`` scores; a NaN (a diverged model) ranks as ``-inf``, never above a
            number.
        k: list length; more than ``C`` gives ``C``.
    """
    k = min(k, scores.shape[1])
    if k == 0:  # an empty catalogue: nothing to list
        return scores[:, :0], torch.zeros_like(scores[:, :0], dtype=torch.long)
    scores = nan_as_lowest(scores)
    values, items = scores.topk(k, dim=1)  # (B, k)
    threshold = values[:, -1:]  # (B, 1): the K-th best score
    columns = torch.arange(scores.shape[1], device=scores.device)  # (C,)
    tied = torch.where(scores == threshold, columns, scores.shape[1])  # (B, C): C if not tied
    tied = tied.topk(k, dim=1, largest=False).values  # (B, k): the tied columns, lowest first
    above = values > threshold  # (B, k): a prefix of each row
    seat = torch.arange(k, device=scores.device) - above.sum(1, keepdim=True)  # (B, k)
    items = torch.where(above, items, tied.gather(1, seat.clamp(min=0)))  # (B, k): the list
    items = items.sort(dim=1).values  # column order, kept among equal scores by:
    values, order = scores.gather(1, items).sort(dim=1, descending=True, stable=True)
    return values, items.gather(1, order)


def top_items(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's best ``k`` columns, best first, equal scores in column order.

    Args:
        scores: ``(B, C)`` rankable scores: PAD and excluded items at ``-inf``
            (:func:`recsys_seq.models.ranking.rankable_scores`).
        k: list length; more than ``C`` gives ``C``.

    Returns:
        ``(items, valid)``, each ``(B, min(k, C))``: column indices, and False where the slot
        holds an item at ``-inf`` (the row had fewer rankable items than the list has slots;
        such slots come last and are no recommendation).
    """
    values, items = top_scored(scores, k)
    return items, values > float("-inf")
