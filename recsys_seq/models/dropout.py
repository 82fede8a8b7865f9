"""Dropout with a cheaper random mask on CPU.

On CPU, torch's dropout draws one random number per value, and at the sizes of a training
step the draw is most of its cost: on one core of a 2-core AMD EPYC, ``(128, 50, 64)`` values
take 5.9 ms. A quarter as many 64-bit draws, each read as four 16-bit uniforms, take 0.55 ms
and give the same kind of mask (each value kept independently, with probability ``1 - p`` to
1/65536). The encoders apply dropout up to nine times a step, so this is a tenth of a small
step (docs/benchmarks.md). Other devices keep torch's fused kernel.
"""

from __future__ import annotations

import torch
from torch import nn

LEVELS = 1 << 16  # a 16-bit uniform per value


def keep_scale(shape: torch.Size, p: float, dtype: torch.dtype) -> torch.Tensor:
    """``shape`` values, each ``1 / (1 - p')`` with probability ``1 - p'`` and 0 otherwise,
    independently, where ``p'`` is ``p`` rounded to a multiple of 1/65536 (exact for 0.5,
    0.25, ...). Drawn from torch's default CPU generator, so ``torch.manual_seed`` (and
    Lightning's seeding) makes it reproducible."""
    count = shape.numel()
    words = -(-count // 4)  # four 16-bit uniforms per 64-bit draw
    bits = torch.randint(-(1 << 63), (1 << 63) - 1, (words,), dtype=torch.int64)
    uniform = bits.view(torch.int16)[:count].view(shape)  # uniform over [-32768, 32767]
    dropped = round(p * LEVELS)
    keep = uniform >= dropped - LEVELS // 2  # P = (LEVELS - dropped) / LEVELS
    return keep.to(dtype) * (LEVELS / (LEVELS - dropped))


class Dropout(nn.Dropout):
    """:class:`torch.nn.Dropout` (inverted: kept values scaled by ``1 / (1 - p)``, identity in
    eval mode) whose mask, on CPU, comes from :func:`keep_scale`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p in (0.0, 1.0) or x.device.type != "cpu" or self.inplace:
            return super().forward(x)
        return x * keep_scale(x.shape, self.p, x.dtype)
