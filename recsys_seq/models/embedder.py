"""Items and their side features -> one vector per event."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn


class ItemEmbedder(nn.Module):
    """The sum of an event's item embedding and its side-feature embeddings (category,
    event type, ...), each ``D`` wide; PAD (index 0 of every table) is exactly 0.

    The item table doubles as the output table of dot-product scoring (tied embeddings), so
    it is sized for dot products: std ``D**-0.5`` per dimension, unit-norm vectors on average.

    Args:
        num_items: N, real items 1..N (0 is PAD).
        d_model: D.
        side_features: ``{batch key: vocabulary size incl. PAD}`` of the features to add.
    """

    def __init__(self, num_items: int, d_model: int, side_features: Mapping[str, int]) -> None:
        super().__init__()
        self.features = nn.ModuleDict(
            {name: _table(size, d_model) for name, size in side_features.items()}
        )
        self.items = _table(num_items + 1, d_model)

    @property
    def num_items(self) -> int:
        return self.items.num_embeddings - 1

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``(B, T, D)`` event vectors from the batch's ``items`` and side features."""
        x = self.items(batch["items"])  # (B, T, D)
        for name, table in self.features.items():
            x = x + table(batch[name])
        return x


def _table(rows: int, d_model: int) -> nn.Embedding:
    table = nn.Embedding(rows, d_model, padding_idx=0)
    nn.init.normal_(table.weight, std=d_model**-0.5)
    with torch.no_grad():
        table.weight[0].zero_()  # PAD: no gradient reaches it, so it stays 0
    return table
