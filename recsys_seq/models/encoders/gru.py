"""GRU sequence encoder (GRU4Rec-like)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from recsys_seq.core.options import option
from recsys_seq.models.dropout import Dropout
from recsys_seq.models.encoders import ENCODERS


@dataclass(frozen=True)
class GRUOptions:
    """``model.encoder`` for :class:`GRUEncoder`."""

    name: Literal["gru"] = "gru"
    hidden_size: int = option(64, min=1)
    num_layers: int = option(1, min=1)
    dropout: float = option(0.5, min=0.0, below=1.0)


@ENCODERS.register(GRUOptions)
class GRUEncoder(nn.Module):
    """Maps embedded, right-padded sequences to one hidden state per position with a GRU.

    A unidirectional GRU's state at step t depends on steps ``0..t`` only, and batches are
    right-padded, so running it over the padded tensor gives every real position exactly the
    state a packed (``pack_padded_sequence``) run would: PAD steps come after all real ones
    and are never read. This skips packing's sort/unsort and its lengths-on-CPU requirement
    (a host-device sync per step on GPUs); the PAD steps it computes are a few percent of the
    work with length-bucketed batches, and their outputs are zeroed.

    Args:
        d_model: width of the input embeddings and of the output states.
        hidden_size: GRU width (projected back to ``d_model`` when different).
        num_layers: stacked GRU layers.
        dropout: dropout on the input embeddings and between layers.
    """

    def __init__(
        self, d_model: int = 64, hidden_size: int = 64, num_layers: int = 1, dropout: float = 0.5
    ) -> None:
        super().__init__()
        self.dropout = Dropout(dropout)
        self.gru = nn.GRU(
            d_model,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.out = nn.Identity() if hidden_size == d_model else nn.Linear(hidden_size, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """See :class:`~recsys_seq.models.encoders.SequenceEncoder`; ``lengths`` is not
        needed (no packing, see above)."""
        states, _ = self.gru(self.dropout(x))  # (B, T, H)
        return self.out(states) * mask[..., None].to(x.dtype)  # (B, T, D)
