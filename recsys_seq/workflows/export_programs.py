"""The functions ``recsys-export`` writes: a trained network as one program of plain tensors,
with no Lightning inside.

* :class:`NextItemScorer`, for models with the dot-product scorer (sasrec, gru, and any
  encoder)::

      scores = program(items, mask, *features)   # items (B, T) long, mask (B, T) bool,
                                                  # right-padded -> (B, N + 1) float32 scores
                                                  # of every item as the next event

  Scores are :func:`~recsys_seq.models.ranking.rankable_scores` of the plain network
  (:class:`~recsys_seq.models.NextItemModel`): PAD (column 0) is ``-inf``; with
  ``exclude_history=true`` the input items are ``-inf`` too (a caller who leaves out a
  history longer than the window sets the older items -inf itself).
* :class:`TwoStageRanker`, for two-stage models (``rerank=topk``)::

      candidates, scores = program(items, mask, exclude, *features)   # each (B, K)

  the retriever's top-K in the ranker's order, never an ``exclude`` item ``(B, S)`` (0 for
  none).

Both take item *indices* (1..N, 0 is PAD), not original ids, and the side features a model
reads as further ``(B, T)`` long inputs, in the order of ``feature_names``
(:func:`~recsys_seq.exported_contract.input_names`). DIN alone scores the catalogue in a loop
of chunks, which is not exported.
"""

from __future__ import annotations

import torch
from torch import nn

from recsys_seq.exported_contract import ITEM_SCORES, RANKED_CANDIDATES
from recsys_seq.models import NextItemModel, TwoStageTask
from recsys_seq.models.ranking import rankable_scores
from recsys_seq.models.scorers import DotProductScorer
from recsys_seq.models.two_stage import feature_tables


class NextItemScorer(nn.Module):
    """``(items, mask, *side features) -> (B, N + 1)`` next-item scores of a trained network.

    Args:
        model: a trained :class:`NextItemModel` with the dot-product scorer (put in eval mode).
        exclude_history: score the input items ``-inf`` (as evaluation with
            ``model.exclude_history=true``).
    """

    layout = ITEM_SCORES  # what the program gives (recsys_seq.exported_contract)

    def __init__(self, model: NextItemModel, exclude_history: bool = False) -> None:
        super().__init__()
        if not isinstance(model.scorer, DotProductScorer):
            raise TypeError(
                f"export supports the dot-product scorer, not {type(model.scorer).__name__}"
            )
        self.model = model.eval()
        self.exclude_history = exclude_history
        self.feature_tables = dict(model.embedder.features)
        self.feature_names = list(self.feature_tables)

    def forward(self, items: torch.Tensor, mask: torch.Tensor, *features: torch.Tensor):
        """
        Args:
            items: ``(B, T)`` long item indices, right-padded with 0.
            mask: ``(B, T)`` bool, True for a real event (every row has at least one).
            features: ``(B, T)`` long side features named by :attr:`feature_names`.

        Returns:
            ``(B, N + 1)`` float32 scores; PAD (and excluded history) at ``-inf``.
        """
        batch = {"items": items, "mask": mask, "lengths": mask.sum(1)}
        batch |= dict(zip(self.feature_names, features, strict=True))
        exclude = items if self.exclude_history else None
        return rankable_scores(self.model.score_next(batch), exclude)


class TwoStageRanker(nn.Module):
    """``(items, mask, exclude, *side features) -> (candidates (B, K), scores (B, K))`` of a
    two-stage model: the retriever's top-K, never an ``exclude`` item (nor, with
    ``exclude_history``, an input item), in the ranker's order, with the ranker's scores
    (:meth:`Candidates.ranked`). ``exclude`` is an input because the candidates are chosen
    inside: a caller who leaves out a history longer than the window must say so before
    the top-K is taken, not filter it afterwards.

    Holds the task's plain :class:`Reranker` (no Lightning: TorchScript cannot trace a
    module that is not attached to a Trainer).

    Args:
        task: a trained :class:`TwoStageTask` (put in eval mode).
        exclude_history: never return an input item; None: as the task was trained.
    """

    layout = RANKED_CANDIDATES

    def __init__(self, task: TwoStageTask, exclude_history: bool | None = None) -> None:
        super().__init__()
        self.reranker = task.eval().reranker
        self.model = task.retriever  # what sizes the inputs (items, max_len)
        self.num_candidates = task.num_candidates
        self.exclude_history = task.exclude_history if exclude_history is None else exclude_history
        self.feature_tables = feature_tables(task)  # the side features either stage reads
        self.feature_names = list(self.feature_tables)

    def forward(
        self,
        items: torch.Tensor,
        mask: torch.Tensor,
        exclude: torch.Tensor,
        *features: torch.Tensor,
    ):
        """
        Args:
            items, mask, features: as for :meth:`NextItemScorer.forward`.
            exclude: ``(B, S)`` long item indices never to return, 0 for none.
        """
        batch = {"items": items, "mask": mask, "lengths": mask.sum(1)}
        batch |= dict(zip(self.feature_names, features, strict=True))
        if self.exclude_history:
            exclude = torch.cat([items, exclude], 1)  # (B, T + S)
        return self.reranker.candidates(batch, exclude).ranked()


ServingProgram = NextItemScorer | TwoStageRanker


def example_inputs(
    scorer: ServingProgram, batch_size: int, length: int, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """Random right-padded inputs in :func:`~recsys_seq.exported_contract.input_names` order:
    one row of full length, the others shorter (and for a two-stage model two items to
    exclude per row, some of them 0)."""
    generator = torch.Generator().manual_seed(seed)
    num_items = scorer.model.embedder.num_items
    lengths = torch.randint(1, length + 1, (batch_size,), generator=generator)
    lengths[0] = length
    mask = torch.arange(length) < lengths[:, None]  # (B, T)
    items = torch.randint(1, num_items + 1, (batch_size, length), generator=generator) * mask
    exclude = torch.randint(0, num_items + 1, (batch_size, 2), generator=generator)  # (B, S)
    features = [
        torch.randint(1, table.num_embeddings, (batch_size, length), generator=generator) * mask
        for table in scorer.feature_tables.values()
    ]
    head = (items, mask, exclude) if scorer.layout == RANKED_CANDIDATES else (items, mask)
    return (*head, *features)


def max_length(model: NextItemModel) -> int | None:
    """The longest sequence the encoder accepts (learned positions), or None (any)."""
    return getattr(model.encoder, "max_len", None)
