"""The frequency-enhanced encoder (model=bsarec): what its filter computes, where it may be
trained, and that it runs in bf16."""

import pytest
import torch

from recsys_seq.core.options import OptionError
from recsys_seq.data.batch import padding_mask
from recsys_seq.models.encoders.frequency_attention import SpectralFilter
from tests.helpers import D, encoder_with, train_config

MAX_LEN = 10


def filter_with(low_frequencies: int, beta: float) -> SpectralFilter:
    spectral = SpectralFilter(D, MAX_LEN, low_frequencies)
    with torch.no_grad():
        spectral.sqrt_beta.fill_(beta**0.5)
    return spectral


def windows(lengths: list[int], width: int) -> torch.Tensor:
    """Random windows, zero in PAD slots (as the encoder hands them to its filters)."""
    x = torch.randn(len(lengths), width, D, generator=torch.Generator().manual_seed(4))
    return x * padding_mask(torch.tensor(lengths), width)[..., None]


def test_the_lowest_frequency_alone_is_the_mean_over_the_max_len_frame():
    """One kept frequency is the constant term: the window's sum over ``max_len`` slots,
    whatever the batch's width, so a short window's low part is not inflated by a narrow batch."""
    x = windows([3, 6], 6)
    low = filter_with(1, beta=0.0)(x)  # beta 0: the low part only
    expected = x.sum(1, keepdim=True) / MAX_LEN  # (B, 1, D)
    torch.testing.assert_close(low, expected.expand_as(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("low_frequencies", "beta"), [(MAX_LEN // 2 + 1, 0.3), (2, 1.0), (99, 0.0)]
)
def test_all_frequencies_kept_or_unit_beta_leave_the_window_unchanged(low_frequencies, beta):
    x = windows([4, 7, 1], 7)
    torch.testing.assert_close(filter_with(low_frequencies, beta)(x), x, rtol=1e-5, atol=1e-5)


def test_beta_scales_what_the_low_frequencies_leave_out():
    x = windows([5, 8], 8)
    low = filter_with(2, beta=0.0)(x)
    torch.testing.assert_close(filter_with(2, beta=2.5)(x), low + 2.5 * (x - low))
    assert not torch.allclose(low, x, atol=1e-3)  # the split is not trivial on random data


def test_runs_under_bf16_autocast_with_pad_states_zero():
    encoder = encoder_with("frequency_attention", max_len=MAX_LEN)
    lengths = torch.tensor([6, 2])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        states = encoder(torch.randn(2, 6, D), padding_mask(lengths, 6), lengths)
    assert torch.isfinite(states).all()
    assert (states[~padding_mask(lengths, 6)] == 0).all()


@pytest.mark.parametrize("windows_option", ["all", "last"])
def test_training_on_every_position_is_refused_before_any_work(tmp_path, demo_dir, windows_option):
    """Every position of a window is a target under ``all`` and ``last``: an encoder whose
    states read later events would see them."""
    from recsys_seq.workflows.train import train

    cfg = train_config(
        tmp_path / "run", demo_dir, "model=bsarec", f"data.train_windows={windows_option}"
    )
    with pytest.raises(OptionError, match="train_windows=prefixes"):
        train(cfg)
    assert not (tmp_path / "run" / "checkpoints").exists()
