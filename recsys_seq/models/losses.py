"""Training objectives: a batch's states -> a scalar loss, and the table of those a config names.

Every loss is called as ``loss(states, batch, model)`` with the encoder's states ``(B, T, D)``
and the :class:`~recsys_seq.models.network.NextItemModel` (for its item table and scorer).
PAD positions are excluded by weighting, not by boolean indexing, so no step waits on the
device for a data-dependent shape.

Dense losses train next-item prediction at every real position at once and need the
dot-product scorer (they score with the item table directly):

* ``full_softmax``: cross-entropy over all items (the default; best quality), in blocks of
  items so that the ``(B, T, N + 1)`` logits are never held
  (:mod:`~recsys_seq.models.full_softmax`).
* ``sampled_softmax``, ``bce``, ``gbce``: the target against sampled negatives
  (:mod:`~recsys_seq.models.sampled_losses`).

``candidate_bce`` (DIN's objective) works with any scorer: random cut points per window, the
item after each cut against sampled negatives, scored by the model's scorer on the history up
to the cut (:mod:`~recsys_seq.models.candidate_bce`).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from recsys_seq.models.candidate_bce import CandidateBCELoss, CandidateBCEOptions
from recsys_seq.models.components import Components
from recsys_seq.models.full_softmax import FullSoftmaxLoss, FullSoftmaxOptions
from recsys_seq.models.sampled_losses import (
    BinaryCrossEntropyLoss,
    BinaryCrossEntropyOptions,
    GeneralisedBCELoss,
    GeneralisedBCEOptions,
    SampledSoftmaxLoss,
    SampledSoftmaxOptions,
)


class Loss(Protocol):
    """What the task needs of a loss: one scalar from the encoder's states and the batch.

    ``states (B, T, D)`` are the network's (``model.encode``); the batch holds ``targets
    (B, T)`` (the next item at each position, :data:`IGNORE_INDEX` at PAD, which must add
    nothing to the loss or its gradient), ``mask (B, T)`` and ``lengths (B,)``; ``model`` gives
    the item table and the scorer, so the loss scores exactly what evaluation ranks.
    """

    def __call__(self, states: torch.Tensor, batch: dict, model: nn.Module) -> torch.Tensor: ...


def _registry(*entries: tuple[type, type[nn.Module]]) -> Components:
    """A :class:`Components` registry of ``(options class, loss)`` entries."""
    registry = Components("loss")
    for options, loss in entries:
        registry.register(options)(loss)
    return registry


LOSSES = _registry(
    (FullSoftmaxOptions, FullSoftmaxLoss),
    (SampledSoftmaxOptions, SampledSoftmaxLoss),
    (BinaryCrossEntropyOptions, BinaryCrossEntropyLoss),
    (GeneralisedBCEOptions, GeneralisedBCELoss),
    (CandidateBCEOptions, CandidateBCELoss),
)
"""The losses a config may name (``model.loss.name``): a new one is a row here."""
