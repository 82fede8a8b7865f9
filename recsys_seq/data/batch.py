"""Jagged windows -> a right-padded batch with a boolean mask.

A batch is a dict of tensors. For three users with 3, 1 and 2 input items (``-100`` is
:data:`IGNORE_INDEX`)::

    items          mask                 lengths   targets (train)        target (eval)
    [[7, 3, 9],    [[T, T, T],          [3,       [[3, 9, 4],            [4,
     [5, 0, 0],     [T, F, F],           1,        [8, -100, -100],       8,
     [2, 6, 0]]     [T, T, F]]           2]        [6, 1, -100]]          1]

* ``mask`` is True for a real event (one convention everywhere); ``mask`` is derived from
  ``lengths`` (``arange(L) < lengths[:, None]``), which is the single source of truth.
* Padding is on the right and only to the batch's own longest window (optionally rounded up to
  a multiple of ``pad_to_multiple_of``). PAD is item 0 and feature value 0.
* ``targets[b, t]`` is the item that follows ``items[b, t]`` (training); ``target[b]`` is the
  held-out item after the whole window (validation/test). ``user`` is the user index.
  ``negatives`` (eval, optional) holds fixed sampled candidates for sampled metrics;
  ``seen`` (serving) every item of the user's whole known history, 0-padded.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

IGNORE_INDEX = -100
"""Target value that every loss in the project ignores (PAD positions)."""


@dataclass
class JaggedWindows:
    """A batch before padding: flat ``values`` plus ``lengths`` (torchrec's jagged layout).

    Attributes:
        items: ``(T,)`` long, the input items of all windows concatenated, T = lengths.sum().
        lengths: ``(B,)`` long, window lengths (>= 1).
        user: ``(B,)`` long user indices.
        next_items: ``(T,)`` long, the item following each input item, or None (eval).
        target: ``(B,)`` long held-out item after each window, or None (train).
        features: side features, each ``(T,)`` long, parallel to ``items``.
        negatives: ``(B, n)`` long fixed negative candidates for sampled metrics, or None.
        seen, seen_lengths: serving: every item of each user's whole history, flat, and
            how many per user; or None.
    """

    items: torch.Tensor
    lengths: torch.Tensor
    user: torch.Tensor
    next_items: torch.Tensor | None = None
    target: torch.Tensor | None = None
    features: dict[str, torch.Tensor] | None = None
    negatives: torch.Tensor | None = None
    seen: torch.Tensor | None = None
    seen_lengths: torch.Tensor | None = None


def padding_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """``(B, max_len)`` bool, True where ``t < lengths[b]`` (a real event)."""
    return torch.arange(max_len, device=lengths.device) < lengths[:, None]


def to_padded_dense(values: torch.Tensor, mask: torch.Tensor, fill: int = 0) -> torch.Tensor:
    """Scatter flat jagged ``values`` into a right-padded ``mask.shape`` tensor.

    Row-major boolean assignment fills each row's first ``lengths[b]`` slots in order, which is
    exactly the jagged layout, without a loop over rows.
    """
    dense = torch.full(mask.shape, fill, dtype=values.dtype)
    dense[mask] = values
    return dense


@dataclass
class PaddedBatchCollator:
    """Pads :class:`JaggedWindows` to the batch's longest window.

    Args:
        pad_to_multiple_of: round the padded length up to a multiple of this (e.g. 8 for
            tensor cores); None pads to the longest window exactly.
    """

    pad_to_multiple_of: int | None = None

    def __call__(self, windows: JaggedWindows) -> dict[str, torch.Tensor]:
        longest = int(windows.lengths.max())
        if self.pad_to_multiple_of:
            m = self.pad_to_multiple_of
            longest = -(-longest // m) * m
        mask = padding_mask(windows.lengths, longest)  # (B, L)
        batch = {
            "items": to_padded_dense(windows.items, mask),
            "mask": mask,
            "lengths": windows.lengths,
            "user": windows.user,
        }
        if windows.next_items is not None:
            batch["targets"] = to_padded_dense(windows.next_items, mask, fill=IGNORE_INDEX)
        if windows.target is not None:
            batch["target"] = windows.target
        if windows.negatives is not None:
            batch["negatives"] = windows.negatives
        if windows.seen is not None:
            seen_mask = padding_mask(windows.seen_lengths, int(windows.seen_lengths.max()))
            batch["seen"] = to_padded_dense(windows.seen, seen_mask)
        for name, values in (windows.features or {}).items():
            batch[name] = to_padded_dense(values, mask)
        return batch
