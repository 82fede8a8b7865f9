"""Next-item training losses over every real position of a batch.

Each loss maps hidden states ``(B, T, D)``, next-item targets ``(B, T)`` (IGNORE_INDEX on PAD)
and the item table ``(N + 1, D)`` to a scalar. PAD positions are excluded by weighting, not by
boolean indexing, so no step waits on the device for a data-dependent shape.

* :class:`FullSoftmaxLoss`: cross-entropy over all items (the default; best quality when the
  catalogue fits).
* :class:`SampledSoftmaxLoss`: cross-entropy over the target and ``num_negatives`` items shared
  by the batch, drawn uniformly or by popularity, with the log-Q correction (subtract
  ``log q(item)`` from every logit) so the estimate is not biased towards rare items.
* :class:`BinaryCrossEntropyLoss`: the original SASRec objective, the target against
  ``num_negatives`` uniformly drawn items per position.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recsys_seq.data.batch import IGNORE_INDEX

DISTRIBUTIONS = ("uniform", "popularity")


def _mean_over_real(per_position: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    real = (targets != IGNORE_INDEX).to(per_position.dtype)
    return (per_position * real).sum() / real.sum().clamp(min=1)


class FullSoftmaxLoss(nn.Module):
    def forward(
        self, hidden: torch.Tensor, targets: torch.Tensor, items: torch.Tensor
    ) -> torch.Tensor:
        logits = hidden @ items.T  # (B, T, N + 1)
        logits = logits.index_fill(-1, targets.new_zeros(1), torch.finfo(logits.dtype).min)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)


class _NegativeSampling(nn.Module):
    """Draws negative items 1..N uniformly or by training popularity, on the model's device."""

    def __init__(self, num_negatives: int, distribution: str) -> None:
        super().__init__()
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
        if num_negatives < 1:
            raise ValueError(f"num_negatives must be >= 1, got {num_negatives}")
        self.num_negatives = num_negatives
        self.distribution = distribution
        self.register_buffer("probs", torch.empty(0), persistent=False)

    def fit_items(self, train_counts: np.ndarray) -> None:
        """Set the sampling distribution from ``(N + 1,)`` training counts (PAD never drawn)."""
        counts = torch.as_tensor(train_counts, dtype=torch.float32)
        if self.distribution == "uniform":
            counts = torch.ones_like(counts)
        counts[0] = 0
        self.probs = (counts / counts.sum()).to(self.probs.device)

    def draw(self, shape: tuple[int, ...]) -> torch.Tensor:
        if self.probs.numel() == 0:
            raise RuntimeError("call fit_items(train_counts) before training with negatives")
        flat = torch.multinomial(self.probs, int(np.prod(shape)), replacement=True)
        return flat.view(shape)


class SampledSoftmaxLoss(_NegativeSampling):
    def __init__(self, num_negatives: int = 256, distribution: str = "uniform") -> None:
        super().__init__(num_negatives, distribution)

    def forward(
        self, hidden: torch.Tensor, targets: torch.Tensor, items: torch.Tensor
    ) -> torch.Tensor:
        negatives = self.draw((self.num_negatives,))  # (K,) shared by the batch
        safe_targets = targets.clamp(min=0)  # IGNORE -> PAD; weighted out below
        positive = (hidden * items[safe_targets]).sum(-1)  # (B, T)
        negative = hidden @ items[negatives].T  # (B, T, K)
        log_q = self.probs.clamp(min=torch.finfo(self.probs.dtype).tiny).log()
        positive = positive - log_q[safe_targets]
        negative = negative - log_q[negatives]
        hit = negatives == safe_targets[..., None]  # (B, T, K) an accidental positive
        negative = negative.masked_fill(hit, torch.finfo(negative.dtype).min)
        logits = torch.cat([positive[..., None], negative], dim=-1)  # (B, T, 1 + K)
        per_position = -F.log_softmax(logits, dim=-1)[..., 0]
        return _mean_over_real(per_position, targets)


class BinaryCrossEntropyLoss(_NegativeSampling):
    def __init__(self, num_negatives: int = 1) -> None:
        super().__init__(num_negatives, "uniform")

    def forward(
        self, hidden: torch.Tensor, targets: torch.Tensor, items: torch.Tensor
    ) -> torch.Tensor:
        safe_targets = targets.clamp(min=0)
        negatives = self.draw((*targets.shape, self.num_negatives))  # (B, T, K)
        positive = (hidden * items[safe_targets]).sum(-1)  # (B, T)
        negative = (hidden[..., None, :] * items[negatives]).sum(-1)  # (B, T, K)
        per_position = F.softplus(-positive) + F.softplus(negative).sum(-1)
        return _mean_over_real(per_position, targets)
