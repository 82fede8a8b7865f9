"""Frequency-enhanced self-attention encoder (BSARec-like): attention beside a spectral filter.

Each block mixes two views of the sequence: causal self-attention, and a filter that splits
the sequence along time into its lowest frequencies (the slow drift of a user's taste) and the
rest (the sharp recent changes), rescaling the rest by a learned weight per channel. The
filter gives attention an inductive bias it lacks on short, sparse logs (Shin et al., "An
Attentive Inductive Bias for Sequential Recommendation beyond the Self-Attention", AAAI 2024).

The filter sees the whole window, so the state at position t depends on later events: the
encoder may only be trained on windows whose one target follows their last event
(``data.train_windows=prefixes`` or ``holdout``), which :func:`recsys_seq.configs.spec_for_data`
enforces. Serving reads the state after the last event, where this never matters.

Why the result does not depend on the batch's padding: PAD states are zeroed before every
filter and the transform always spans ``max_len`` slots (zero beyond the batch's longest
window), so a window is filtered in the same ``max_len`` frame whatever its batch mates are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from recsys_seq.core.options import option
from recsys_seq.models.dropout import Dropout
from recsys_seq.models.encoders import ENCODERS
from recsys_seq.models.encoders.self_attention import (
    AttentionStackOptions,
    CausalSelfAttention,
    FeedForward,
    position_index,
)


@dataclass(frozen=True)
class FrequencyAttentionOptions(AttentionStackOptions):
    """``model.encoder`` for :class:`FrequencyAttentionEncoder`."""

    name: Literal["frequency_attention"] = "frequency_attention"
    num_heads: int = option(1, min=1)
    # weight of the filtered view against attention's (BSARec's alpha)
    filter_weight: float = option(0.7, min=0.0, max=1.0)
    # frequencies of the max_len-slot transform kept as "low" (BSARec's c // 2 + 1)
    low_frequencies: int = option(3, min=1)

    sees_whole_window: ClassVar[bool] = True  # a state may read later events (see module)


class SpectralFilter(nn.Module):
    """``low + beta^2 * (x - low)``: ``low`` keeps the lowest ``low_frequencies`` of the
    sequence's real FFT over ``max_len`` slots, ``beta`` is learned per channel.

    The low-pass is linear in time, so it is applied as its ``(max_len, max_len)`` matrix
    (the filtered unit impulses), cut to the batch's width: the same result as transforming
    each window, with no FFT kernels (none in bf16, none that export with a dynamic length).
    """

    def __init__(self, d_model: int, max_len: int, low_frequencies: int) -> None:
        super().__init__()
        impulses = torch.fft.rfft(torch.eye(max_len), dim=0, norm="ortho")  # (F, N)
        low_pass = torch.fft.irfft(impulses[:low_frequencies], n=max_len, dim=0, norm="ortho")
        self.register_buffer("low_pass", low_pass, persistent=False)  # (N, N): [t, s]
        self.sqrt_beta = nn.Parameter(torch.randn(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        slots = torch.arange(x.shape[1], device=x.device)  # (T,)
        low_pass = self.low_pass[slots][:, slots].to(x.dtype)  # (T, T); x is 0 beyond T
        low = torch.einsum("ts,bsd->btd", low_pass, x)  # (B, T, D)
        return low + self.sqrt_beta**2 * (x - low)


class FrequencyAttentionBlock(nn.Module):
    """``alpha * LN(x + filter(x)) + (1 - alpha) * LN(x + attention(x))``, then a
    feed-forward branch, each residual sum normalised (post-norm, as BSARec)."""

    def __init__(
        self,
        d_model: int,
        max_len: int,
        num_heads: int,
        ffn_hidden: int,
        dropout: float,
        filter_weight: float,
        low_frequencies: int,
    ) -> None:
        super().__init__()
        self.filter_weight = filter_weight
        self.filter = SpectralFilter(d_model, max_len, low_frequencies)
        self.filter_dropout = Dropout(dropout)
        self.ln_filter = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, num_heads, dropout)
        self.ln_attn = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, ffn_hidden, dropout)
        self.ln_ffn = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        x = x * keep  # the filter must see zeros in PAD slots
        filtered = self.ln_filter(x + self.filter_dropout(self.filter(x)))
        attended = self.ln_attn(x + self.attn(x))
        mixed = self.filter_weight * filtered + (1 - self.filter_weight) * attended
        return self.ln_ffn(mixed + self.ffn(mixed))


@ENCODERS.register(FrequencyAttentionOptions)
class FrequencyAttentionEncoder(nn.Module):
    """Maps embedded, right-padded windows to one state per position; the state at
    ``lengths - 1`` predicts the next item (see the module docstring for what it may read).

    Args:
        d_model: width of the input embeddings and hidden states.
        **fields: the fields of :class:`FrequencyAttentionOptions`, the one owner of their
            defaults:

            * ``max_len``: longest window (learned positions and the filter's frame);
            * ``num_layers``: blocks;
            * ``num_heads``: attention heads per block;
            * ``ffn_multiplier``: feed-forward hidden width as a multiple of ``d_model``;
            * ``dropout``: dropout on embeddings, attention weights and every residual branch;
            * ``filter_weight``: share of the filtered view in each block's mix (``alpha``);
            * ``low_frequencies``: FFT frequencies the filter counts as low.
    """

    def __init__(self, d_model: int, **fields: Any) -> None:
        super().__init__()
        options = FrequencyAttentionOptions(**fields)
        self.max_len = options.max_len
        # numbered back from the last event, as BSARec's left-padded windows are
        self.positions = nn.Embedding(options.max_len, d_model)
        nn.init.normal_(self.positions.weight, std=d_model**-0.5)
        self.ln_in = nn.LayerNorm(d_model)
        self.dropout = Dropout(options.dropout)
        self.blocks = nn.ModuleList(
            FrequencyAttentionBlock(
                d_model,
                options.max_len,
                options.num_heads,
                options.ffn_multiplier * d_model,
                options.dropout,
                options.filter_weight,
                options.low_frequencies,
            )
            for _ in range(options.num_layers)
        )

    def no_weight_decay(self) -> set[str]:
        """The position table is a lookup, not a transformation."""
        return {"positions.weight"}

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """See :class:`~recsys_seq.models.encoders.SequenceEncoder` (but states may read
        later events of their window)."""
        T = x.shape[1]
        if T > self.max_len:
            raise ValueError(f"sequence length {T} exceeds the encoder's max_len={self.max_len}")
        keep = mask[..., None].to(x.dtype)  # (B, T, 1)
        x = self.ln_in(x + self.positions(position_index(T, lengths, self.max_len, True)))
        x = self.dropout(x)  # (B, T, D)
        for block in self.blocks:
            x = block(x, keep)
        return x * keep
