"""Losses: PAD positions never count, sampled losses behave as their definitions say."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from recsys_seq.data import IGNORE_INDEX
from recsys_seq.models.losses import BinaryCrossEntropyLoss, FullSoftmaxLoss, SampledSoftmaxLoss

N, D = 20, 8


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(3, 5, D, generator=g)
    items = torch.randn(N + 1, D, generator=g)
    targets = torch.randint(1, N + 1, (3, 5), generator=g)
    targets[1, 3:] = IGNORE_INDEX
    targets[2, 1:] = IGNORE_INDEX
    return hidden, targets, items


def fitted(loss):
    loss.fit_items(np.arange(N + 1))  # popularity grows with the index; PAD 0
    return loss


@pytest.mark.parametrize(
    "loss",
    [
        FullSoftmaxLoss(),
        fitted(SampledSoftmaxLoss(8, "uniform")),
        fitted(SampledSoftmaxLoss(8, "popularity")),
        fitted(BinaryCrossEntropyLoss(2)),
    ],
    ids=["full", "sampled_uniform", "sampled_popularity", "bce"],
)
def test_pad_positions_do_not_change_the_loss(loss):
    hidden, targets, items = inputs()
    torch.manual_seed(1)
    before = loss(hidden, targets, items)
    scrambled = hidden.clone()
    scrambled[targets == IGNORE_INDEX] = 1e3  # garbage in PAD slots
    torch.manual_seed(1)
    after = loss(scrambled, targets, items)
    assert torch.isfinite(before) and torch.allclose(before, after)


def test_full_softmax_is_cross_entropy_over_real_items():
    hidden, targets, items = inputs()
    logits = hidden @ items[1:].T  # PAD excluded from the classes
    real = targets != IGNORE_INDEX
    expected = F.cross_entropy(logits[real], targets[real] - 1)
    assert torch.allclose(FullSoftmaxLoss()(hidden, targets, items), expected, atol=1e-6)


def test_sampled_softmax_with_all_items_as_negatives_approaches_full_softmax():
    """Uniform log-Q is a constant shift, so with every item drawn the losses coincide
    (up to the duplicates of sampling with replacement)."""
    hidden, targets, items = inputs()
    loss = fitted(SampledSoftmaxLoss(20_000, "uniform"))
    torch.manual_seed(0)
    sampled = loss(hidden, targets, items)
    full = FullSoftmaxLoss()(hidden, targets, items)
    # each item appears ~1000 times among the negatives: log(1000) shift, same ranking signal
    assert abs((sampled - full).item() - math.log(1000)) < 0.2


def test_negatives_never_include_pad():
    loss = SampledSoftmaxLoss(4, "popularity")
    loss.fit_items(np.r_[50, np.ones(N - 1), 30])  # PAD's count must be ignored
    drawn = loss.draw((10_000,))
    assert drawn.min() >= 1 and drawn.max() <= N
    # popularity: the most popular item is drawn most often
    assert torch.bincount(drawn, minlength=N + 1).argmax() == N


def test_negative_sampling_requires_item_counts():
    hidden, targets, items = inputs()
    with pytest.raises(RuntimeError, match="fit_items"):
        SampledSoftmaxLoss(4)(hidden, targets, items)
