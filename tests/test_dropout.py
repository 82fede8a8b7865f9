"""The CPU dropout mask: torch's dropout in distribution, cheaper to draw."""

import pytest
import torch
from torch import nn

from recsys_seq.models.dropout import Dropout, keep_scale


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.9])
def test_each_value_is_kept_with_probability_one_minus_p_and_scaled_by_its_inverse(p):
    torch.manual_seed(0)
    scale = keep_scale(torch.Size([400, 1000]), p, torch.float32)
    kept = scale > 0
    assert set(scale.unique().tolist()) <= {0.0, scale.max().item()}
    assert scale.max().item() == pytest.approx(1 / (1 - p), rel=1e-4)
    # 400k independent draws: the kept share within 5 standard deviations of 1 - p
    assert kept.float().mean().item() == pytest.approx(1 - p, abs=5 * (p * (1 - p) / 4e5) ** 0.5)
    assert scale.mean().item() == pytest.approx(1.0, abs=0.01)  # the expectation is kept


def test_the_mask_has_no_pattern_across_the_four_values_of_one_draw():
    """Each 64-bit draw gives four values: every one of the four lanes, and neighbours,
    must be as random as the rest (a draw with a fixed top bit would keep every 4th value)."""
    torch.manual_seed(1)
    kept = keep_scale(torch.Size([1_000_000]), 0.5, torch.float32) > 0
    lanes = kept.view(-1, 4).float().mean(0)
    assert torch.allclose(lanes, torch.full((4,), 0.5), atol=0.005)
    both = (kept[:-1] & kept[1:]).float().mean().item()
    assert both == pytest.approx(0.25, abs=0.005)


def test_odd_sizes_and_dtypes_get_a_mask_of_their_own_shape():
    torch.manual_seed(2)
    for shape in [(1,), (3,), (7, 5), (2, 3, 5)]:
        for dtype in (torch.float32, torch.bfloat16):
            scale = keep_scale(torch.Size(shape), 0.5, dtype)
            assert scale.shape == shape and scale.dtype == dtype
            assert set(scale.unique().tolist()) <= {0.0, 2.0}


def test_dropout_trains_like_torch_and_is_the_identity_in_eval_mode():
    layer = Dropout(0.5)
    x = torch.randn(64, 50, 16, requires_grad=True)
    torch.manual_seed(3)
    y = layer(x)
    dropped = y == 0
    assert torch.equal(y[~dropped], x[~dropped] * 2)
    y.sum().backward()
    assert torch.equal(x.grad, (~dropped).float() * 2)  # no gradient through dropped values
    torch.manual_seed(3)
    assert torch.equal(layer(x), y)  # seeded: reproducible
    layer.eval()
    assert layer(x) is x
    assert isinstance(layer, nn.Dropout)  # every place that finds dropout layers finds it


def test_p_zero_and_p_one_behave_as_torch_dropout():
    x = torch.randn(10, 10)
    assert torch.equal(Dropout(0.0)(x), x)
    assert torch.equal(Dropout(1.0)(x), torch.zeros_like(x))
