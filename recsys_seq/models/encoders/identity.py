"""The history as it is: DIN reads the embedded events themselves, not a summary of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from recsys_seq.models.encoders import ENCODERS


@dataclass(frozen=True)
class IdentityOptions:
    """``model.encoder`` for :class:`IdentityEncoder` (no options)."""

    name: Literal["identity"] = "identity"


@ENCODERS.register(IdentityOptions)
class IdentityEncoder(nn.Module):
    """Each event's state is its own embedding (PAD zeroed): trivially causal, so it fits
    every objective; a target-attention scorer then weighs the raw events themselves."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return x * mask[..., None].to(x.dtype)
