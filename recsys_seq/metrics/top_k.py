"""Each user's top-K list as the beyond-accuracy metrics read it: one ``torch.topk`` per
batch, on device, with exact ties broken towards the lower item index.

``torch.topk`` alone leaves the order of equal scores to its kernel, which differs between
CPU and GPU and may depend on the batch's shape; for ranking metrics that is harmless (the
target's rank counts ties pessimistically), but which items fill a list decides coverage and
Gini, and the popularity baseline scores many items exactly alike (the same training count).
Ranking a key that holds the score in its high bits and the reversed item index in its low
bits makes every key distinct: the lists are the first K of a stable descending sort of the
scores, on every device, in every batch, and a user's list never depends on the other users.
"""

from __future__ import annotations

import torch

LOW_BITS = 32  # the item index's part of the key (catalogues below 2**32 items)


def sortable_keys(scores: torch.Tensor) -> torch.Tensor:
    """``(B, C)`` int64 keys ordered as ``scores (B, C)`` (float32), then by lower column.

    A float32's bits read as an int32 keep the float order for positive numbers and reverse
    it for negative ones; flipping a negative number's magnitude bits puts them in order.
    ``+ 0.0`` turns ``-0.0`` into ``0.0``, which compares equal as a float and must as a key.
    """
    # in place where possible: evaluation holds a (B, N + 1) score matrix already
    bits = (scores.float() + 0.0).view(torch.int32)  # (B, C), a copy
    negative = (bits >> 31).bitwise_and_(0x7FFFFFFF)  # (B, C): magnitude bits of negatives
    ordered = bits.bitwise_xor_(negative)  # (B, C) int32, in the scores' order
    columns = scores.shape[1]
    reversed_index = columns - 1 - torch.arange(columns, device=scores.device)  # (C,)
    return ordered.long().bitwise_left_shift_(LOW_BITS).add_(reversed_index)  # (B, C)


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
    _, items = sortable_keys(scores).topk(min(k, scores.shape[1]), dim=1)  # (B, k)
    valid = scores.gather(1, items) > float("-inf")
    return items, valid
