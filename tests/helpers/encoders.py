"""The SequenceEncoder contract, checked on any encoder."""

import torch
from torch import nn

from recsys_seq.data.batch import padding_mask
from recsys_seq.models import ENCODERS

D = 16
ATOL = 1e-5


def encoder_with(name: str, **options) -> nn.Module:
    """``name`` with its options' defaults but ``options``, D wide, in eval mode (no
    dropout)."""
    torch.manual_seed(0)
    return ENCODERS.build(ENCODERS.options(name)(**options), d_model=D).eval()


def assert_encoder_contract(encoder: nn.Module, causal: bool = True) -> None:
    """The contract of :class:`~recsys_seq.models.encoders.SequenceEncoder`: a real
    position's state depends neither on extra right padding nor on batch mates, PAD states are
    exactly 0, and the state at t depends on events 0..t only; or, for an encoder that is
    not ``causal`` (its options say ``sees_whole_window``), on later events of the window too.

    PAD slots of ``x`` hold garbage, not zeros: an encoder must not read them. ``encoder``
    is D wide and in eval mode (no dropout)."""
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([5, 2, 7, 1])
    T, extra = int(lengths.max()), 4
    x = torch.randn(len(lengths), T + extra, D, generator=g)  # (B, T + extra, D)

    def encode(x: torch.Tensor, lengths: torch.Tensor, width: int) -> torch.Tensor:
        return encoder(x[:, :width], padding_mask(lengths, width), lengths)  # (B, width, D)

    mask = padding_mask(lengths, T)  # (B, T)
    with torch.no_grad():
        states = encode(x, lengths, T)
        assert states.shape == (len(lengths), T, D)
        assert (states[~mask] == 0).all(), "PAD states must be exactly 0"
        assert (states[mask] != 0).any()

        padded = encode(x, lengths, T + extra)  # padded further than the longest row
        assert torch.allclose(padded[:, :T], states, atol=ATOL)
        assert (padded[:, T:] == 0).all()

        for row, n in enumerate(lengths.tolist()):  # each row alone: no mates, no padding
            alone = encode(x[row : row + 1], lengths[row : row + 1], n)[0]
            assert torch.allclose(alone, states[row, :n], atol=ATOL), (row, n)

        mates = torch.randn(3, T + extra, D, generator=g)  # row 0 among other mates
        mates_lengths = torch.tensor([lengths[0], 9, 3])
        together = encode(torch.cat([x[:1], mates]), torch.cat([lengths[:1], mates_lengths]), 9)
        assert torch.allclose(together[0, :T], states[0], atol=ATOL)

        reads_ahead = []
        for t in range(T - 1):  # rewrite events t+1.. of every row: states 0..t stay
            changed = x.clone()
            changed[:, t + 1 :] = torch.randn(changed[:, t + 1 :].shape, generator=g)
            after = encode(changed, lengths, T)
            past_kept = torch.allclose(after[:, : t + 1], states[:, : t + 1], atol=ATOL)
            assert past_kept or not causal, t
            reads_ahead.append(not past_kept)
            real = mask[:, t + 1]  # and the rewrite is seen where it is real
            assert not torch.allclose(after[real, t + 1], states[real, t + 1], atol=ATOL), t
        assert causal or any(reads_ahead), "says it sees the whole window, yet never reads ahead"
