"""Scorers: the encoder's states and a candidate item -> how likely it is the next event.

A scorer answers two questions, both about the history a boolean mask lets it see:

* :meth:`score` - logits of given candidates, ``(B, C)``; ``visible (B, C or 1, T)`` says
  which events each candidate's history holds (training cuts histories short);
* :meth:`score_all` - logits of every item 1..N after the whole window, ``(B, N + 1)`` with
  PAD's column at the dtype's minimum (what evaluation and serving rank).

Item vectors come from the embedder (:attr:`ItemEmbedder.vectors
<recsys_seq.models.embedder.ItemEmbedder.vectors>`: the item table plus the items' attributes),
passed in as ``items``, so the table is stored once and shared (tied) between input and output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from recsys_seq.core.options import option
from recsys_seq.models.components import Components
from recsys_seq.models.embedder import ItemVectors
from recsys_seq.models.target_attention import TargetAttention, mlp

SCORERS = Components("scorer")


class Scorer(nn.Module):
    """What the network needs of a scorer (the two questions above). A scorer implements
    :meth:`score_vectors` and :meth:`score_all`; :meth:`score` looks its candidates up."""

    def score(
        self,
        states: torch.Tensor,
        visible: torch.Tensor,
        candidates: torch.Tensor,
        items: ItemVectors,
    ) -> torch.Tensor:
        """``states (B, T, D)``, ``visible (B, C or 1, T)`` bool, ``candidates (B, C)`` item
        indices -> ``(B, C)`` logits."""
        return self.score_vectors(states, visible, items(candidates))

    def score_vectors(
        self, states: torch.Tensor, visible: torch.Tensor, vectors: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`score` of candidates given as their vectors: ``(B, C, D)``, or ``(C, D)``
        the same for every row."""
        raise NotImplementedError

    def score_all(
        self, states: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, items: ItemVectors
    ) -> torch.Tensor:
        """``states (B, T, D)``, ``mask (B, T)`` bool True for a real event, ``lengths (B,)``
        -> ``(B, N + 1)`` logits of every item after the whole window, PAD at the minimum."""
        raise NotImplementedError


def with_pad_at_minimum(logits: torch.Tensor) -> torch.Tensor:
    """``(B, N + 1)`` logits with PAD's column 0 set to the dtype's minimum."""
    pad = torch.zeros(1, dtype=torch.long, device=logits.device)
    return logits.index_fill(-1, pad, torch.finfo(logits.dtype).min)


@dataclass(frozen=True)
class DotProductOptions:
    """``model.scorer``: the state at the last visible event, dot the item's embedding."""

    name: Literal["dot_product"] = "dot_product"


@SCORERS.register(DotProductOptions)
class DotProductScorer(Scorer):
    """``<state after the last visible event, item embedding>``: one matrix product scores
    the whole catalogue, and training can score every position at once (the dense losses of
    :mod:`recsys_seq.models.losses` use :attr:`item table <ItemEmbedder.items>` directly)."""

    def score_vectors(
        self, states: torch.Tensor, visible: torch.Tensor, vectors: torch.Tensor
    ) -> torch.Tensor:
        last = visible.sum(-1) - 1  # (B, C or 1): the state that has seen the visible events
        index = last.clamp(min=0)[..., None].expand(-1, -1, states.shape[-1])
        summary = states.gather(1, index)  # (B, C or 1, D)
        return (summary * vectors).sum(-1)  # (B, C)

    def score_all(
        self, states: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, items: ItemVectors
    ) -> torch.Tensor:
        last = states[torch.arange(states.shape[0], device=states.device), lengths - 1]
        return with_pad_at_minimum(last @ items.weight.T)  # (B, N + 1)


@dataclass(frozen=True)
class TargetAttentionOptions:
    """``model.scorer`` for :class:`TargetAttentionScorer` (DIN)."""

    name: Literal["target_attention"] = "target_attention"
    hidden: list[int] = option([32, 16], min=1)  # activation unit; the paper: [80, 40]
    activation: Literal["prelu", "relu", "sigmoid"] = "prelu"
    attention: Literal["sum", "sigmoid", "softmax"] = "softmax"
    mlp_hidden: list[int] = option([200, 80], min=1)  # scoring MLP; the paper: [200, 80]
    mlp_activation: Literal["prelu", "relu", "sigmoid"] = "prelu"
    dropout: float = option(0.0, min=0.0, below=1.0)
    eval_chunk_size: int = option(128, min=1)


@SCORERS.register(TargetAttentionOptions)
class TargetAttentionScorer(Scorer):
    """DIN's scorer: the user's interest *in this candidate* is the attention-weighted sum of
    the history states (:class:`TargetAttention`), and an MLP over
    ``[interest, candidate, interest * candidate]`` gives the logit.

    Every candidate gets its own interest vector, so all-item scoring runs in chunks of
    ``eval_chunk_size`` candidates; memory is about ``4 * B * T * chunk * (D + 2 * hidden[0])``
    bytes.

    Args:
        d_model: D, the width of states and item embeddings.
        **fields: the fields of :class:`TargetAttentionOptions`, the one owner of their
            defaults: ``hidden``, ``activation``, ``attention`` for the activation unit
            (:class:`TargetAttention`); ``mlp_hidden``, ``mlp_activation``, ``dropout`` for
            the scoring MLP; ``eval_chunk_size``, candidates per chunk in :meth:`score_all`.
    """

    def __init__(self, d_model: int = 64, **fields: Any) -> None:
        super().__init__()
        options = TargetAttentionOptions(**fields)
        self.attention = TargetAttention(
            d_model, list(options.hidden), options.activation, options.attention
        )
        self.head = mlp(
            [3 * d_model, *options.mlp_hidden, 1], options.mlp_activation, dropout=options.dropout
        )
        self.eval_chunk_size = options.eval_chunk_size

    def score_vectors(
        self,
        states: torch.Tensor,
        visible: torch.Tensor,
        vectors: torch.Tensor,
        history_term: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Also takes ``history_term``: ``self.attention.history_term(states)``, when the same
        history is scored in several chunks."""
        weights = self.attention(states, vectors, visible, history_term)  # (B, C, T); 0 unseen
        interest = weights @ states  # (B, C, D)
        if vectors.dim() == 2:  # (C, D) shared by every row
            vectors = vectors.expand(states.shape[0], -1, -1)
        return self.head(torch.cat([interest, vectors, interest * vectors], dim=-1)).squeeze(-1)

    def score_all(
        self, states: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, items: ItemVectors
    ) -> torch.Tensor:
        history_term = self.attention.history_term(states)  # (B, T, H), shared by all chunks
        catalogue = torch.arange(1, items.num_embeddings, device=states.device)
        visible = mask[:, None, :]  # (B, 1, T): the whole window
        chunks = [
            self.score_vectors(states, visible, items(chunk), history_term)  # (B, chunk)
            for chunk in catalogue.split(self.eval_chunk_size)
        ]
        pad = chunks[0].new_zeros(chunks[0].shape[0], 1)  # (B, 1), set to the minimum below
        return with_pad_at_minimum(torch.cat([pad, *chunks], dim=1))  # (B, N + 1)
