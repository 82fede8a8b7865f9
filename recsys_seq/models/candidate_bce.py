"""DIN's objective (``candidate_bce``), with any scorer: random cut points per window, the item
after each cut against sampled negatives, scored by the model's scorer on the history up to
the cut. The two-stage ranker trains on the same cuts and candidates
(:mod:`recsys_seq.models.two_stage`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from recsys_seq.core.options import option


@dataclass(frozen=True)
class CandidateBCEOptions:
    name: Literal["candidate_bce"] = "candidate_bce"
    num_negatives: int = option(16, min=1)
    cuts_per_window: int = option(4, min=1)
    exclude_positive: bool = True
    scorers: ClassVar[tuple[str, ...]] = ("dot_product", "target_attention")


class CandidateBCELoss(nn.Module):
    """DIN's pointwise objective, vectorised over the batch.

    ``cuts_per_window`` random cut points per window; the history is ``window[:cut]`` and the
    positive is the item after it (``targets[b, cut - 1]``), scored against ``num_negatives``
    uniformly drawn items (never PAD; never the positive when ``exclude_positive``), with
    binary cross-entropy. Randomness comes from torch's global generator, which
    ``seed_everything`` seeds.

    Args:
        num_items: N (>= 2, so that a negative other than the positive exists).
    """

    def __init__(
        self,
        num_items: int,
        num_negatives: int = 16,
        cuts_per_window: int = 4,
        exclude_positive: bool = True,
    ) -> None:
        super().__init__()
        if num_items < 2:
            raise ValueError(f"candidate_bce needs at least 2 items, got {num_items}")
        self.num_items = num_items
        self.num_negatives = num_negatives
        self.cuts_per_window = cuts_per_window
        self.exclude_positive = exclude_positive

    def cuts(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cut (B, S) in 1..lengths[b], positive (B, S))``: ``cuts_per_window`` random cut
        points per window and the item after each (``targets[b, cut - 1]``)."""
        lengths = batch["lengths"]
        shape = (lengths.shape[0], self.cuts_per_window)
        cut = 1 + (torch.rand(shape, device=lengths.device) * lengths[:, None]).long()
        cut = torch.minimum(cut, lengths[:, None])  # guard the float edge u * len == len
        return cut, batch["targets"].gather(1, cut - 1)

    def random_negatives(self, positive: torch.Tensor, count: int) -> torch.Tensor:
        """``(*positive.shape, count)`` uniformly drawn items, never PAD; never the positive
        when ``exclude_positive``."""
        shape = (*positive.shape, count)
        if self.exclude_positive:
            other = torch.randint(1, self.num_items, shape, device=positive.device)
            return other + (other >= positive[..., None]).long()  # 1..N without the positive
        return torch.randint(1, self.num_items + 1, shape, device=positive.device)

    def sample(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cut (B, S) in 1..lengths[b], candidates (B, S, 1 + K))``, positive first."""
        cut, positive = self.cuts(batch)
        negatives = self.random_negatives(positive, self.num_negatives)
        return cut, torch.cat([positive[..., None], negatives], dim=-1)

    def forward(self, states: torch.Tensor, batch: dict, model: nn.Module) -> torch.Tensor:
        cut, candidates = self.sample(batch)  # (B, S), (B, S, 1 + K)
        visible = cut_visibility(cut, candidates.shape[-1], states.shape[1])
        logits = model.score(states, visible, candidates.flatten(1))
        return positive_first_bce(logits.view(candidates.shape))


def cut_visibility(cut: torch.Tensor, per_cut: int, length: int) -> torch.Tensor:
    """``(B, S * per_cut, T)`` bool: each of a cut's ``per_cut`` candidates sees
    ``window[:cut]`` (never PAD, never the events after the cut)."""
    positions = torch.arange(length, device=cut.device)
    visible = positions < cut[..., None]  # (B, S, T)
    return visible[:, :, None].expand(-1, -1, per_cut, -1).flatten(1, 2)


def positive_first_bce(logits: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of ``(..., 1 + K)`` logits whose first column is the positive."""
    labels = torch.zeros_like(logits)
    labels[..., 0] = 1.0
    return F.binary_cross_entropy_with_logits(logits, labels)
