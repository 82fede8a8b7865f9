"""The default loss, ``full_softmax``: cross-entropy over all items at every real position.

The best quality of the losses. It needs the dot-product scorer (it scores with the item table
directly), and it runs in blocks of items so that the ``(B, T, N + 1)`` logits are never held
(:func:`block_shape`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import nn

from recsys_seq.core.options import option
from recsys_seq.data.batch import IGNORE_INDEX
from recsys_seq.models.chunked_ce import chunked_cross_entropy
from recsys_seq.models.scorers import with_pad_at_minimum


@dataclass(frozen=True)
class FullSoftmaxOptions:
    """``model.loss`` for :class:`FullSoftmaxLoss`."""

    name: Literal["full_softmax"] = "full_softmax"
    # items / positions per block; auto: by device (block_shape); chunk_size null or 0: dense
    chunk_size: int | Literal["auto"] | None = option("auto", min=0)
    row_chunk_size: int | Literal["auto"] | None = option("auto", min=1)  # null: all positions
    scorers: ClassVar[tuple[str, ...]] = ("dot_product",)


CPU_BLOCK = (1024, 1024)  # items x positions: cache-sized, fastest at 1k-54k items on CPU
ACCELERATOR_BLOCK_LOGITS = 2**28  # 1 GiB of float32 logits: few, large products on a GPU


def block_shape(
    device: torch.device, num_items: int, rows: int, chunk_size, row_chunk_size
) -> tuple[int, int]:
    """``(items, positions)`` per block of the chunked loss; ``"auto"`` picks by device.

    On CPU, cache-sized 1024 x 1024 blocks beat the dense logits at every catalogue size
    measured (``recsys-bench task=loss``). On a GPU the same blocks make a step hundreds of
    small kernel launches (a Beauty step of 16k positions: 16 x 12 blocks, each a dozen
    kernels), so there a block holds the whole catalogue and as many positions as fit in
    :data:`ACCELERATOR_BLOCK_LOGITS`: one block at the usual sizes, bounded memory at any.
    """
    accelerator = device.type != "cpu"
    if chunk_size == "auto":
        chunk_size = min(num_items, ACCELERATOR_BLOCK_LOGITS) if accelerator else CPU_BLOCK[0]
    if row_chunk_size == "auto":
        row_chunk_size = (
            max(1, ACCELERATOR_BLOCK_LOGITS // chunk_size) if accelerator else CPU_BLOCK[1]
        )
    return chunk_size, min(row_chunk_size or rows, rows)


class FullSoftmaxLoss(nn.Module):
    """Cross-entropy over all items 1..N at every real position.

    With ``chunk_size`` the logits are made ``row_chunk_size x chunk_size`` at a time and
    never held whole (:func:`~recsys_seq.models.chunked_ce.chunked_cross_entropy`): memory no
    longer grows with ``B * T * N``, and on CPU the cache-sized blocks make the step faster
    than the dense ``(B, T, N + 1)`` logits at every catalogue size measured (1k to 54k items,
    ``recsys-bench task=loss``). ``chunk_size`` null or 0 is that dense path.

    Args:
        chunk_size: items per block; ``"auto"``: by device (:func:`block_shape`); None or 0:
            the dense logits.
        row_chunk_size: positions (of ``B * T``) per block; ``"auto"``: by device; None: all.
    """

    def __init__(
        self,
        chunk_size: int | str | None = "auto",
        row_chunk_size: int | str | None = "auto",
    ) -> None:
        super().__init__()
        self.chunk_size = chunk_size or None
        self.row_chunk_size = row_chunk_size

    def forward(self, states: torch.Tensor, batch: dict, model: nn.Module) -> torch.Tensor:
        targets = batch["targets"]
        if self.chunk_size is not None:
            hidden = states.flatten(0, 1)  # (B * T, D)
            items, rows = block_shape(
                hidden.device,
                model.item_table.shape[0] - 1,
                hidden.shape[0],
                self.chunk_size,
                self.row_chunk_size,
            )
            return chunked_cross_entropy(hidden, model.item_table, targets.flatten(), items, rows)
        logits = with_pad_at_minimum(states @ model.item_table.T)  # (B, T, N + 1)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)
