"""Losses over sampled negatives: each real position's target against a few drawn items.

They need the dot-product scorer (they score with the item table directly):

* ``sampled_softmax``: cross-entropy over the target and a pool of negatives shared by the
  batch: ``num_negatives`` items drawn uniformly or by training popularity, the batch's own
  targets (``in_batch``), or both (mixed), with the log-Q correction (subtract the log of
  each item's expected count in the pool from its logit) so the estimate is not biased
  towards rare items.
* ``bce``: the original SASRec objective, the target against ``num_negatives`` uniformly drawn
  items per position; ``gbce`` (gSASRec) the same with its target term calibrated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recsys_seq.core.options import OptionError, option
from recsys_seq.data.batch import IGNORE_INDEX
from recsys_seq.data.negatives import DISTRIBUTIONS, Distribution


def gather_rows(table: torch.Tensor, *indices: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The rows of ``table (N + 1, D)`` at each of ``indices``, each ``(*index shape, D)``,
    from one lookup.

    Each lookup's backward writes a gradient the size of the whole table (zeroed, then rows
    added), and autograd sums those: with the input embedding, a loss that looked up targets
    and negatives apart made three table-sized gradients a step where two do; on a 2-core
    CPU a small step (Games, batch 128) spent a third of its time there (docs/benchmarks.md).
    """
    flat = torch.cat([index.flatten() for index in indices])
    rows = F.embedding(flat, table)  # (sum of sizes, D)
    parts = rows.split([index.numel() for index in indices])
    return tuple(part.view(*index.shape, -1) for part, index in zip(parts, indices, strict=True))


def _mean_over_real(per_position: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    real = (targets != IGNORE_INDEX).to(per_position.dtype)
    return (per_position * real).sum() / real.sum().clamp(min=1)


def _probabilities(item_counts: np.ndarray | None, distribution: Distribution) -> torch.Tensor:
    """``(N + 1,)`` probabilities over items 1..N (PAD 0): uniform, or by training counts;
    empty without counts (a model rebuilt for evaluation only)."""
    if item_counts is None:
        return torch.empty(0)
    probs = torch.as_tensor(np.asarray(item_counts), dtype=torch.float32)
    if distribution == "uniform":
        probs = torch.ones_like(probs)
    probs[0] = 0
    return probs / probs.sum()


class _NegativeSampling(nn.Module):
    """Draws negative items 1..N uniformly or by training popularity, on the model's device.

    Args:
        num_negatives: items drawn per draw.
        distribution: ``uniform`` or ``popularity``.
        item_counts: ``(N + 1,)`` training counts (PAD is never drawn); with None (a model
            rebuilt for evaluation only) the loss refuses to draw.
    """

    def __init__(
        self, num_negatives: int, distribution: Distribution, item_counts: np.ndarray | None
    ) -> None:
        super().__init__()
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
        if num_negatives < 0:
            raise ValueError(f"num_negatives must be >= 0, got {num_negatives}")
        self.num_negatives = num_negatives
        self.register_buffer("probs", _probabilities(item_counts, distribution), persistent=False)

    def _check_counts(self) -> None:
        if self.probs.numel() == 0:
            raise RuntimeError("this loss was built without the training item counts")

    def draw(self, shape: tuple[int, ...]) -> torch.Tensor:
        self._check_counts()
        flat = torch.multinomial(self.probs, int(np.prod(shape)), replacement=True)
        return flat.view(shape)


@dataclass(frozen=True)
class SampledSoftmaxOptions:
    """``model.loss`` for :class:`SampledSoftmaxLoss`: ``num_negatives`` drawn items, the
    batch's own targets (``in_batch``), or both (mixed negatives)."""

    name: Literal["sampled_softmax"] = "sampled_softmax"
    num_negatives: int = option(256, min=0)
    distribution: Distribution = "uniform"
    in_batch: bool = False
    scorers: ClassVar[tuple[str, ...]] = ("dot_product",)

    def check(self, where: str) -> None:
        if self.num_negatives == 0 and not self.in_batch:
            raise OptionError(
                f"{where}: sampled_softmax needs negatives: num_negatives >= 1, or "
                "in_batch=true (the batch's other targets)."
            )


class SampledSoftmaxLoss(_NegativeSampling):
    """Cross-entropy over each position's target and a pool of negatives shared by the batch.

    The pool holds ``num_negatives`` items drawn by ``distribution`` and, with ``in_batch``,
    the targets of every real position of the batch (in-batch negatives: free, and as
    frequent as items are popular, so the hard head of the catalogue is always there). Both
    together are mixed negatives (Yang et al., WWW 2020). Every logit, the target's included,
    is corrected by ``log E[times the item is in the pool]`` = ``log(K q_draw(i) + R
    q_pop(i))`` with R the batch's real positions (log-Q; Yi et al., RecSys 2019), so the loss
    estimates the full softmax instead of favouring rare items. A pool entry equal to the
    position's target (its own, or an accidental hit) and the entries of PAD positions are
    left out. Memory: ``(B * T) x (K + B * T)`` logits with ``in_batch``.
    """

    def __init__(
        self,
        num_negatives: int = 256,
        distribution: Distribution = "uniform",
        in_batch: bool = False,
        item_counts: np.ndarray | None = None,
    ) -> None:
        super().__init__(num_negatives, distribution, item_counts)
        if num_negatives == 0 and not in_batch:
            raise ValueError("sampled_softmax needs num_negatives >= 1 or in_batch")
        self.in_batch = in_batch
        popularity = _probabilities(item_counts, "popularity") if in_batch else torch.empty(0)
        self.register_buffer("popularity", popularity, persistent=False)

    def forward(self, states: torch.Tensor, batch: dict, model: nn.Module) -> torch.Tensor:
        self._check_counts()
        targets, items = batch["targets"], model.item_table
        flat_states = states.flatten(0, 1)  # (R, D), R = B * T
        real = (targets != IGNORE_INDEX).flatten()  # (R,)
        flat_targets = targets.flatten().clamp(min=0)  # IGNORE -> PAD; weighted out below
        expected = self.num_negatives * self.probs  # (N + 1,) expected times in the pool
        pool, usable = [], []
        if self.num_negatives:
            pool.append(self.draw((self.num_negatives,)))
            usable.append(torch.ones_like(pool[-1], dtype=torch.bool))
        if self.in_batch:
            pool.append(flat_targets)
            usable.append(real)
            expected = expected + real.sum() * self.popularity
        pool, usable = torch.cat(pool), torch.cat(usable)  # (M,)
        log_q = expected.clamp(min=torch.finfo(expected.dtype).tiny).log()
        target_rows, pool_rows = gather_rows(items, flat_targets, pool)  # (R, D), (M, D)
        positive = (flat_states * target_rows).sum(-1) - log_q[flat_targets]  # (R,)
        negative = flat_states @ pool_rows.T - log_q[pool]  # (R, M)
        left_out = (pool[None] == flat_targets[:, None]) | ~usable[None]  # (R, M)
        negative = negative.masked_fill(left_out, torch.finfo(negative.dtype).min)
        logits = torch.cat([positive[:, None], negative], dim=1)  # (R, 1 + M)
        per_position = -F.log_softmax(logits, dim=-1)[:, 0]
        return _mean_over_real(per_position.view_as(targets), targets)


@dataclass(frozen=True)
class BinaryCrossEntropyOptions:
    name: Literal["bce"] = "bce"
    num_negatives: int = option(1, min=1)
    scorers: ClassVar[tuple[str, ...]] = ("dot_product",)


class BinaryCrossEntropyLoss(_NegativeSampling):
    """Each position's target against ``num_negatives`` uniformly drawn items, each a binary
    decision (SASRec's objective)."""

    positive_weight = 1.0  # the target's term; gBCE raises it (GeneralisedBCELoss)

    def __init__(self, num_negatives: int = 1, item_counts: np.ndarray | None = None) -> None:
        super().__init__(num_negatives, "uniform", item_counts)

    def forward(self, states: torch.Tensor, batch: dict, model: nn.Module) -> torch.Tensor:
        targets, items = batch["targets"], model.item_table
        safe_targets = targets.clamp(min=0)
        negatives = self.draw((*targets.shape, self.num_negatives))  # (B, T, K)
        scored = torch.cat([safe_targets[..., None], negatives], -1)  # (B, T, 1 + K)
        (rows,) = gather_rows(items, scored)  # (B, T, 1 + K, D)
        logits = (states[..., None, :] * rows).sum(-1)  # (B, T, 1 + K)
        positive = self.positive_weight * F.softplus(-logits[..., 0])  # -beta log sigmoid(s+)
        per_position = positive + F.softplus(logits[..., 1:]).sum(-1)
        return _mean_over_real(per_position, targets)


@dataclass(frozen=True)
class GeneralisedBCEOptions:
    """``model.loss`` for :class:`GeneralisedBCELoss`."""

    name: Literal["gbce"] = "gbce"
    num_negatives: int = option(256, min=1)
    calibration: float = option(0.75, min=0.0, max=1.0)  # gSASRec's t: 0 is plain BCE
    scorers: ClassVar[tuple[str, ...]] = ("dot_product",)


class GeneralisedBCELoss(BinaryCrossEntropyLoss):
    """gBCE (gSASRec; Petrov and Macdonald, RecSys 2023): BCE whose target term is raised
    to the power ``beta``, ``-log sigmoid(s+)^beta - sum log(1 - sigmoid(s-))``.

    With K of the N - 1 other items as negatives, plain BCE learns probabilities for a world
    where a position has K rivals, and is overconfident about the target by the sampling rate
    ``alpha = K / (N - 1)``. ``beta = alpha (t (1 - 1/alpha) + 1/alpha)`` moves from 1 (plain
    BCE, ``t = 0``) to ``alpha`` (fully calibrated, ``t = 1``); the paper's choice is 0.75.

    Args:
        num_items: N, the catalogue the negatives are drawn from.
        calibration: ``t`` in [0, 1].
    """

    def __init__(
        self,
        num_items: int,
        num_negatives: int = 256,
        calibration: float = 0.75,
        item_counts: np.ndarray | None = None,
    ) -> None:
        super().__init__(num_negatives, item_counts)
        if num_items < 2 or not 0.0 <= calibration <= 1.0:
            raise ValueError(
                f"gbce needs num_items >= 2 and calibration in [0, 1], got {num_items} and "
                f"{calibration}"
            )
        alpha = num_negatives / (num_items - 1)
        self.positive_weight = alpha * (calibration * (1 - 1 / alpha) + 1 / alpha)
