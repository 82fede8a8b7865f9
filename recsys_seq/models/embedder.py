"""Items and their side features -> one vector per event.

An item's vector is its own embedding plus, where the model was given an item table's
attributes (``model.side_features=[genres]`` on data prepared with ``items=``), the pooled
embeddings of the item's attribute values. The same vectors feed the encoder and score the
candidates (tied input and output), so a retriever's dot products, DIN's activation unit and
its scoring MLP all see the candidate's attributes beside the history's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import nn

from recsys_seq.core.options import option


@dataclass(frozen=True)
class AttributeShape:
    """An item attribute as :class:`ItemAttributes` holds it: a vocabulary of ``size`` codes
    (PAD/missing 0 included) and ``values`` code slots per item (1 for a categorical or
    bucketed attribute; for a multi-valued one such as genres, the most values of any item)."""

    size: int = option(min=1)
    values: int = option(min=1)


class ItemVectors(Protocol):
    """What scorers and losses read of the items: ``(..., D)`` vectors of given indices, the
    whole ``(N + 1, D)`` ``weight`` and its ``num_embeddings`` (an ``nn.Embedding`` is one)."""

    num_embeddings: int

    @property
    def weight(self) -> torch.Tensor: ...

    def __call__(self, indices: torch.Tensor) -> torch.Tensor: ...


class ItemAttributes(nn.Module):
    """The item table's attributes as one ``D``-wide vector per item: for each attribute the
    mean of the embeddings of the item's values (an item without any adds 0), summed over
    attributes.

    The codes (``(N + 1, values)`` per attribute, 0 = none, row 0 = PAD all zero) are buffers
    in the state dict: a checkpoint and an exported program carry the codes their embeddings
    were trained with, whatever folder they later serve from.

    Args:
        num_items: N.
        d_model: D.
        shapes: ``{attribute: AttributeShape}``.
        std: the tables' initial std.
    """

    def __init__(
        self, num_items: int, d_model: int, shapes: Mapping[str, AttributeShape], std: float
    ) -> None:
        super().__init__()
        # by position, not name: a table's column may be called anything ("brand.name")
        self.names = list(shapes)
        self.tables = nn.ModuleList(_table(s.size, d_model, std) for s in shapes.values())
        for slot, shape in enumerate(shapes.values()):
            codes = torch.zeros(num_items + 1, shape.values, dtype=torch.long)
            self.register_buffer(f"codes_{slot}", codes)

    def codes(self, name: str) -> torch.Tensor:
        """``(N + 1, values)`` the codes of attribute ``name`` per item."""
        return getattr(self, f"codes_{self.names.index(name)}")

    def set_codes(self, codes: Mapping[str, np.ndarray]) -> None:
        """Fill the codes of the attributes in ``codes`` from the data's catalogue
        (:attr:`Catalogue.attributes <recsys_seq.data.catalogue.Catalogue.attributes>`), before
        training; a checkpoint's state dict replaces them with the codes it was trained on."""
        for name in self.names:
            if name not in codes:
                continue
            held = self.codes(name)
            given = torch.as_tensor(codes[name], dtype=torch.long)
            if given.shape != held.shape:
                raise ValueError(
                    f"item attribute {name}: codes of shape {tuple(given.shape)} for a model "
                    f"built for {tuple(held.shape)}"
                )
            held.copy_(given)

    def differing(self, codes: Mapping[str, np.ndarray]) -> list[str]:
        """The attributes whose codes are not ``codes``' (missing there counts as differing)."""
        return [
            name
            for name in self.names
            if name not in codes
            or not torch.equal(self.codes(name).cpu(), torch.as_tensor(codes[name]))
        ]

    def check_codes(self) -> None:
        """Refuse codes outside their vocabularies or a PAD row that is not empty (a state
        dict that recsys-seq did not write)."""
        for name, table in zip(self.names, self.tables, strict=True):
            codes = self.codes(name)
            size = table.num_embeddings
            if bool((codes < 0).any() | (codes >= size).any() | codes[0].any()):
                raise ValueError(
                    f"its item attribute {name} holds codes outside 0..{size - 1} or values for PAD"
                )

    def forward(self, items: torch.Tensor) -> torch.Tensor:
        """``(...,)`` item indices -> ``(..., D)``."""
        total = None
        for slot, table in enumerate(self.tables):
            codes = getattr(self, f"codes_{slot}")[items]  # (..., values)
            present = (codes > 0).sum(-1, keepdim=True).clamp(min=1)  # (..., 1)
            pooled = table(codes).sum(-2) / present  # (..., D); PAD codes embed to 0
            total = pooled if total is None else total + pooled
        return total


class AttributedItems:
    """:class:`ItemVectors` of items with attributes: the item embedding plus its attributes'
    vector; the whole table is computed when asked for (``weight``), once per use. A view
    over the embedder's modules, which own the weights."""

    def __init__(self, items: nn.Embedding, attributes: ItemAttributes) -> None:
        self._parts = (items, attributes)

    @property
    def num_embeddings(self) -> int:
        return self._parts[0].num_embeddings

    @property
    def weight(self) -> torch.Tensor:
        items, attributes = self._parts
        return items.weight + attributes(
            torch.arange(items.num_embeddings, device=items.weight.device)
        )

    def __call__(self, indices: torch.Tensor) -> torch.Tensor:
        items, attributes = self._parts
        return items(indices) + attributes(indices)


class ItemEmbedder(nn.Module):
    """The sum of an event's item vector and its side-feature embeddings (category, event
    type, time gap, ...), each ``D`` wide; PAD (index 0 of every table) is exactly 0.

    The item table doubles as the output table of dot-product scoring (tied embeddings), so
    by default it is sized for dot products: std ``D**-0.5`` per dimension, unit-norm vectors
    on average. Adam moves every weight by about its learning rate per step whatever the
    weight's size, so a smaller start (``std`` 0.02, as BERT and the S3-Rec line of models)
    makes each step a larger share of an embedding: on S3-Rec Beauty with the
    frequency-enhanced encoder, validation NDCG@10 0.0672 after 19 epochs against 0.0600 with
    the default (docs/results.md).

    Args:
        num_items: N, real items 1..N (0 is PAD).
        d_model: D.
        side_features: ``{batch key: vocabulary size incl. PAD}`` of the per-event features.
        std: the tables' initial std; None for ``D**-0.5``.
        attributes: ``{attribute: AttributeShape}`` of the item table's attributes each
            item's vector includes (:class:`ItemAttributes`).
    """

    def __init__(
        self,
        num_items: int,
        d_model: int,
        side_features: Mapping[str, int],
        std: float | None = None,
        attributes: Mapping[str, AttributeShape] | None = None,
    ) -> None:
        super().__init__()
        std = d_model**-0.5 if std is None else std
        self.features = nn.ModuleDict(
            {name: _table(size, d_model, std) for name, size in side_features.items()}
        )
        self.items = _table(num_items + 1, d_model, std)
        self.attributes = (
            ItemAttributes(num_items, d_model, attributes, std) if attributes else None
        )

    @property
    def num_items(self) -> int:
        return self.items.num_embeddings - 1

    @property
    def vectors(self) -> ItemVectors:
        """The items' vectors, as scorers read them (the bare item table without attributes)."""
        if self.attributes is None:
            return self.items
        return AttributedItems(self.items, self.attributes)

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``(B, T, D)`` event vectors from the batch's ``items`` and side features."""
        x = self.vectors(batch["items"])  # (B, T, D)
        for name, table in self.features.items():
            x = x + table(batch[name])
        return x


def _table(rows: int, d_model: int, std: float) -> nn.Embedding:
    table = nn.Embedding(rows, d_model, padding_idx=0)
    nn.init.normal_(table.weight, std=std)
    with torch.no_grad():
        table.weight[0].zero_()  # PAD: no gradient reaches it, so it stays 0
    return table
