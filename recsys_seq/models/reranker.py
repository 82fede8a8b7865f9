"""Both stages of a two-stage model as plain PyTorch: the frozen retriever's top-K re-scored by
the ranker, optionally with the retriever's score as a feature of the logit."""

from __future__ import annotations

import torch
from torch import nn

from recsys_seq.metrics import nan_as_lowest, top_scored
from recsys_seq.models.candidates import Candidates
from recsys_seq.models.network import NextItemModel
from recsys_seq.models.ranking import rankable_scores


class Reranker(nn.Module):
    """Both stages as plain PyTorch, as :class:`NextItemModel` is one stage: the frozen
    retriever's top-K re-scored by the ranker. No Lightning inside, so an exported program
    holds this; :attr:`~recsys_seq.models.two_stage.TwoStageTask.reranker` builds it over the
    task's own modules and weights (shared, not copied), so the task keeps its checkpoint
    layout.

    Args:
        retriever: the retriever's network.
        model: the ranker's network.
        num_candidates: K, the retriever's candidates per window.
        ranker_weight, score_weight: with ``rerank.retriever_score`` the logit is
            ``ranker_weight * ranker + score_weight * retriever score`` (learned parameters,
            or a blend's fixed buffers); None: the ranker's.
    """

    def __init__(
        self,
        retriever: NextItemModel,
        model: NextItemModel,
        num_candidates: int,
        ranker_weight: torch.Tensor | None,
        score_weight: torch.Tensor | None,
    ) -> None:
        super().__init__()
        self.retriever, self.model = retriever, model
        self.num_candidates = num_candidates
        self.ranker_weight, self.score_weight = ranker_weight, score_weight

    def candidates(
        self, batch: dict[str, torch.Tensor], exclude: torch.Tensor | None
    ) -> Candidates:
        """The retriever's top-K for each whole window (``exclude`` items never among them)
        and the ranker's scores of them."""
        retriever_scores = rankable_scores(self.retriever.score_next(batch), exclude)
        k = min(self.num_candidates, retriever_scores.shape[1] - 1)
        top, items = top_scored(retriever_scores, k)  # (B, K), best first, ties by index
        valid = top > float("-inf")  # +inf (an overflow) is still a candidate
        states = self.model.encode(batch)
        logits = self.model.score(states, batch["mask"][:, None, :], items).float()
        logits = self.with_retriever_score(logits, torch.where(valid, top, 0.0))
        ranker_scores = torch.where(valid, nan_as_lowest(logits), float("-inf"))
        return Candidates(retriever_scores, items, valid, ranker_scores)

    def with_retriever_score(self, logits: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
        """The ranker's ``logits`` with the retriever's ``score`` as a feature, when it is one."""
        if self.score_weight is None:
            return logits
        return self.ranker_weight * logits + self.score_weight * score
