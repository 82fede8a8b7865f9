"""DIN-style target attention (Zhou et al., "Deep Interest Network", KDD 2018).

For a candidate item ``c`` the user's interest is a weighted sum of their history embeddings
``h_t``, the weight of each event coming from an *activation unit*, an MLP over
``[h, c, h - c, h * c]``. Interest, candidate and their product go through an MLP that outputs
the candidate's logit. Every candidate gets its own interest vector, so scoring all N items
costs ``B x N x T`` activation-unit evaluations; the code below keeps that cost to one
``D x H`` product per (event, candidate) pair:

    W [h, c, h - c, h * c] = (W1 + W3) h + (W2 - W3) c + W4 (h * c)

The first term is computed once per event, the second once per candidate, and only the third
is per pair. :class:`TargetAttention` parametrises exactly these three matrices (the
four-block form has the same functions; :meth:`TargetAttention.load_concat_weights` converts).
The scorer built on it is :class:`~recsys_seq.models.scorers.TargetAttentionScorer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import nn

ATTENTION_MODES = ("sum", "sigmoid", "softmax")


class ChannelPReLU(nn.Module):
    """PReLU with one slope per channel of the LAST dimension (``nn.PReLU`` uses dim 1)."""

    def __init__(self, channels: int, init: float = 0.25) -> None:
        super().__init__()
        self.slope = nn.Parameter(torch.full((channels,), init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.prelu(x.reshape(-1, x.shape[-1]), self.slope).view(x.shape)  # one fused pass


def make_activation(name: str, channels: int) -> nn.Module:
    if name == "prelu":
        return ChannelPReLU(channels)
    if name == "relu":
        return nn.ReLU()
    if name == "sigmoid":
        return nn.Sigmoid()
    raise ValueError(f"activation must be prelu, relu or sigmoid, got {name!r}")


def mlp(sizes: Sequence[int], activation: str, dropout: float = 0.0) -> nn.Sequential:
    """Linear layers ``sizes[0] -> ... -> sizes[-1]`` with an activation after each hidden one."""
    layers: list[nn.Module] = []
    for i, (width_in, width_out) in enumerate(pairwise(sizes)):
        layers.append(nn.Linear(width_in, width_out))
        if i < len(sizes) - 2:
            layers.append(make_activation(activation, width_out))
            if dropout:
                layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


class TargetAttention(nn.Module):
    """The activation unit: one weight per (candidate, history event) pair, PAD weighted 0.

    Args:
        d_model: D, the width of item embeddings (history and candidates alike).
        hidden: widths of the activation unit's hidden layers (the paper: 80, 40).
        activation: ``prelu`` (per-channel), ``relu`` or ``sigmoid``.
        attention: how the unit's outputs become weights:
            ``sum`` - used as they are (the paper: unnormalised, so the interest vector also
            carries how much of the history is relevant);
            ``sigmoid`` - squashed to (0, 1), still unnormalised;
            ``softmax`` - normalised over the real events of the history.
    """

    def __init__(
        self,
        d_model: int = 64,
        hidden: Sequence[int] = (80, 40),
        activation: str = "prelu",
        attention: str = "softmax",
    ) -> None:
        super().__init__()
        if attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {ATTENTION_MODES}, got {attention!r}")
        if not hidden:
            raise ValueError("the activation unit needs at least one hidden layer")
        self.attention = attention
        first = hidden[0]
        self.history_proj = nn.Linear(d_model, first)  # W1 + W3, and the layer's bias
        self.candidate_proj = nn.Linear(d_model, first, bias=False)  # W2 - W3
        self.product_proj = nn.Linear(d_model, first, bias=False)  # W4
        self.first_activation = make_activation(activation, first)
        self.rest = mlp([*hidden, 1], activation)

    @torch.no_grad()
    def load_concat_weights(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        """Set the first layer from the four-block form ``Linear(4D, H)`` on
        ``[h, c, h - c, h * c]``: ``weight`` is ``(H, 4D)``, ``bias`` ``(H,)``."""
        w1, w2, w3, w4 = weight.chunk(4, dim=1)  # each (H, D)
        self.history_proj.weight.copy_(w1 + w3)
        self.history_proj.bias.copy_(bias)
        self.candidate_proj.weight.copy_(w2 - w3)
        self.product_proj.weight.copy_(w4)

    def history_term(self, history: torch.Tensor) -> torch.Tensor:
        """``(B, T, D)`` -> ``(B, T, H)``: the per-event part of the first layer (with bias).
        Compute it once per batch and pass it to :meth:`forward` for every candidate chunk."""
        return self.history_proj(history)

    def forward(
        self,
        history: torch.Tensor,
        candidates: torch.Tensor,
        mask: torch.Tensor,
        history_term: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attention weights of every history event for every candidate.

        Args:
            history: ``(B, T, D)`` embedded history (right-padded).
            candidates: ``(B, C, D)`` candidate embeddings, or ``(C, D)`` shared by all rows.
            mask: bool, broadcastable to ``(B, C, T)``, True for an event the candidate may
                attend to (a real event; in training also one before the cut point). Every
                row must have at least one True for ``softmax``.
            history_term: :meth:`history_term` of ``history``, if already computed.

        Returns:
            ``(B, C, T)`` weights, exactly 0 where ``mask`` is False.
        """
        if history_term is None:
            history_term = self.history_term(history)  # (B, T, H)
        batch_size, length, _ = history.shape
        width = history_term.shape[-1]
        if candidates.dim() == 2:
            candidates = candidates.expand(batch_size, -1, -1)  # (B, C, D), a view
        # Both per-candidate terms in one batched GEMM over d:
        #   (W2 - W3) c + W4 (h_t * c) = sum_d c_d [(W2 - W3)[:, d] + W4[:, d] h_td]
        # so the per-(event, candidate) work is a single D x H product, with no (B, C, T, D)
        # pair tensor in memory; the per-event term (with the bias) enters as the GEMM's input.
        mixed = (
            history.transpose(1, 2)[..., None] * self.product_proj.weight.T[None, :, None, :]
            + self.candidate_proj.weight.T[None, :, None, :]
        )  # (B, D, T, H), per row not per candidate
        hidden = torch.baddbmm(
            history_term.reshape(batch_size, 1, length * width),  # (B, 1, T*H)
            candidates,  # (B, C, D)
            mixed.flatten(2),  # (B, D, T*H)
        ).view(batch_size, -1, length, width)  # (B, C, T, H)
        logits = self.rest(self.first_activation(hidden)).squeeze(-1)  # (B, C, T)
        mask = mask.expand_as(logits)
        if self.attention == "softmax":
            # additive masking with the dtype's own minimum (constants overflow in fp16)
            logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
            weights = logits.softmax(dim=-1)
        elif self.attention == "sigmoid":
            weights = logits.sigmoid()
        else:
            weights = logits
        return torch.where(mask, weights, torch.zeros_like(weights))  # PAD: exactly 0
