"""The candidate set of a two-stage model: the retriever's top-K re-scored by the ranker, and
the final ranking they make.

The final ranking is the ranker's order of the K candidates (ties in the retriever's order)
followed by every other item in the retriever's order, so all-item metrics are defined for
every user and comparable with the retriever alone: a target outside the top-K keeps exactly
its retriever rank, and a ranker that returns the retriever's scores reproduces the retriever.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from recsys_seq.metrics import top_items, top_scored


def count_at_least(scores: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``(B, M)``: how many of each row's ``scores (B, C)`` are ``>= values (B, M)``."""
    if values.shape[1] == 1:
        return (scores >= values).sum(1, keepdim=True)
    ascending = scores.sort(dim=1).values  # one sort per row, whatever M is
    return scores.shape[1] - torch.searchsorted(ascending, values.contiguous(), right=False)


@dataclass
class Candidates:
    """One batch through both stages.

    Attributes:
        retriever_scores: ``(B, N + 1)`` the retriever's rankable scores (PAD and excluded
            items ``-inf``).
        items: ``(B, K)`` the retriever's top-K, best first.
        valid: ``(B, K)`` True for a real candidate (False where fewer than K items were
            rankable).
        ranker_scores: ``(B, K)`` the ranker's scores, ``-inf`` where not valid.
    """

    retriever_scores: torch.Tensor
    items: torch.Tensor
    valid: torch.Tensor
    ranker_scores: torch.Tensor

    def ranked(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(items, scores)``, each ``(B, K)``: the candidates in the ranker's order (ties
        in the retriever's), with the ranker's scores; invalid ones last, at ``-inf``."""
        scores, order = self.ranker_scores.sort(dim=1, descending=True, stable=True)
        return self.items.gather(1, order), scores

    def retriever_ranks(self, items: torch.Tensor) -> torch.Tensor:
        """``(B, M)`` 0-based pessimistic ranks of ``items (B, M)`` in the retriever's order."""
        return count_at_least(self.retriever_scores, self.retriever_scores.gather(1, items)) - 1

    def top(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(items, valid)``, each ``(B, W)`` with ``W <= k``: the first ``k`` of the final
        ranking, the candidates in :meth:`ranked` order, then the other items in the
        retriever's (:func:`~recsys_seq.metrics.top_items`); ``valid`` False for a slot with
        no rankable item left."""
        items, scores = self.ranked()
        valid = scores > float("-inf")
        if k > items.shape[1]:
            others = self.retriever_scores.scatter(1, self.items, float("-inf"))
            more, more_valid = top_items(others, k - items.shape[1])
            items, valid = torch.cat([items, more], 1), torch.cat([valid, more_valid], 1)
        return items[:, :k], valid[:, :k]

    def top_with_scores(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(items, scores)``, each ``(B, W)`` with ``W = min(k, N)``: the first ``k`` of the
        final ranking with the ranker's scores for the first K positions and the retriever's
        after them."""
        items, scores = self.ranked()
        k = min(k, self.retriever_scores.shape[1] - 1)
        if k > items.shape[1]:
            rest_scores, rest = top_scored(self.retriever_scores, k)
            width = items.shape[1]
            items = torch.cat([items, rest[:, width:]], 1)
            scores = torch.cat([scores, rest_scores[:, width:]], 1)
        return items[:, :k], scores[:, :k]

    def positions(
        self, items: torch.Tensor, retriever_rank: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``(B, M)`` 0-based pessimistic positions of ``items (B, M)`` in the final ranking:
        among the candidates, the ranker's rank; otherwise the retriever's rank (>= K), from
        ``retriever_rank`` when the caller has it (:meth:`retriever_ranks`)."""
        if retriever_rank is None:
            retriever_rank = self.retriever_ranks(items)
        match = (items[:, :, None] == self.items[:, None, :]) & self.valid[:, None, :]  # (B, M, K)
        chosen = match.any(-1)
        column = match.to(torch.uint8).argmax(-1)  # (B, M): where each item is a candidate
        ranker_rank = count_at_least(self.ranker_scores, self.ranker_scores.gather(1, column)) - 1
        return torch.where(chosen, ranker_rank, retriever_rank)

    def target_and_others(
        self, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(column (B, 1), others (B, K - 1), valid (B, K - 1))`` for ``target (B, 1)``: its
        column among the candidates and every other column, ``valid`` where that other one is
        a real candidate and the target is among them (all False for a user whose target is
        not)."""
        hit = (self.items == target) & self.valid  # (B, K): the target among the candidates
        column = hit.to(torch.uint8).argmax(1, keepdim=True)
        others = torch.arange(self.items.shape[1] - 1, device=column.device)[None, :]
        others = others + (others >= column).long()  # every column but the target's
        return column, others, self.valid.gather(1, others) & hit.any(1, keepdim=True)
