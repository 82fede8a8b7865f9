"""The trained network as plain PyTorch: embedder -> encoder -> scorer."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from recsys_seq.models.embedder import ItemEmbedder
from recsys_seq.models.encoders import SequenceEncoder
from recsys_seq.models.scorers import Scorer


class NextItemModel(nn.Module):
    """Scores items as the next event of each sequence in a batch.

    No training, metrics or Lightning here: this is what the task trains
    (:class:`~recsys_seq.models.task.NextItemTask`) and what export serves.

    Args:
        embedder: events -> vectors (:class:`ItemEmbedder`).
        encoder: vectors -> states (:class:`~recsys_seq.models.encoders.SequenceEncoder`).
        scorer: states -> logits (:mod:`recsys_seq.models.scorers`).
    """

    def __init__(self, embedder: ItemEmbedder, encoder: SequenceEncoder, scorer: Scorer) -> None:
        super().__init__()
        self.embedder = embedder
        self.encoder = encoder
        self.scorer = scorer

    @property
    def item_table(self) -> torch.Tensor:
        """``(N + 1, D)`` the item vectors (with their attributes), shared by input and output."""
        return self.embedder.vectors.weight

    def encode(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``(B, T, D)`` states; position t has seen events ``0..t``."""
        return self.encoder(self.embedder(batch), batch["mask"], batch["lengths"])

    def score(
        self, states: torch.Tensor, visible: torch.Tensor, candidates: torch.Tensor
    ) -> torch.Tensor:
        """``(B, C)`` logits of ``candidates`` given the ``visible`` part of the history."""
        return self.scorer.score(states, visible, candidates, self.embedder.vectors)

    def score_next(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``(B, N + 1)`` logits of every item after each whole window; PAD at the minimum."""
        states = self.encode(batch)
        vectors = self.embedder.vectors
        return self.scorer.score_all(states, batch["mask"], batch["lengths"], vectors)
