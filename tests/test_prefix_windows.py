"""``data.train_windows=prefixes``: every cut of a training history is one sample whose target
follows the window's last real event, and padding never reaches the loss."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from recsys_seq.data import PaddedBatchCollator, Stage, WindowDataset
from recsys_seq.models import build_model, model_spec
from recsys_seq.models.task import last_position
from tests.helpers import random_histories, sequences

NUM_ITEMS = 40


@settings(deadline=None, max_examples=80)
@given(
    lengths=st.lists(st.integers(0, 23), min_size=1, max_size=8),
    max_len=st.integers(1, 7),
    holdout=st.integers(0, 3),
    empty_history=st.booleans(),
)
def test_one_sample_per_training_cut_ending_right_before_its_target(
    lengths, max_len, holdout, empty_history
):
    """Each training target (events 1.. of the training history, or 0.. with
    ``empty_history``, without the held-out last ``holdout``) is the target of exactly one
    sample, whose input is the ``max_len`` events right before it, or one PAD slot (item and
    features 0) for the first event; validation and test events never are."""
    histories = [list(range(100 * u + 1, 100 * u + 1 + n)) for u, n in enumerate(lengths)]
    data = sequences(histories, num_items=3000)
    prefixes = WindowDataset(
        data, Stage.TRAIN, max_len, "prefixes", train_holdout=holdout, empty_history=empty_history
    )
    first = 0 if empty_history else 1
    for user, history in enumerate(histories):
        train = history[: max(len(history) - 2 - holdout, 0)]
        rows = np.flatnonzero(prefixes.users == user)
        samples = [prefixes.__getitems__([row]) for row in rows]
        cuts = sorted((s.target.item(), tuple(s.items.tolist())) for s in samples)
        expected = [
            (train[p], tuple(train[max(p - max_len, 0) : p]) or (0,))
            for p in range(first, len(train))
        ]
        assert cuts == expected
        assert all(s.next_items is None for s in samples)
        assert all(
            s.features["category"].tolist() == [i and i % 3 + 1 for i in s.items.tolist()]
            for s in samples
        ), "a real event keeps its features, the PAD slot of an empty history has none"
    assert prefixes.lengths.min(initial=1) >= 1 - empty_history  # 0: no event at all


def test_an_empty_history_is_only_a_prefix():
    data = sequences([[7, 3, 9, 4, 2]], NUM_ITEMS)
    for windows in ("all", "last", "holdout"):
        with pytest.raises(ValueError, match="empty_history needs train_windows='prefixes'"):
            WindowDataset(data, Stage.TRAIN, 3, windows, train_holdout=1, empty_history=True)


def test_prefix_batches_carry_one_target_and_a_mask_of_the_real_events():
    data = sequences([[7, 3, 9, 4, 2, 8, 1], [5, 8, 1, 6]], NUM_ITEMS)
    dataset = WindowDataset(data, Stage.TRAIN, 3, "prefixes")
    batch = PaddedBatchCollator()(dataset.__getitems__(list(range(len(dataset)))))
    assert "targets" not in batch
    lengths = batch["lengths"]
    assert batch["mask"].tolist() == (torch.arange(3) < lengths[:, None]).tolist()
    assert (batch["items"][~batch["mask"]] == 0).all()
    # the user of 7 events trains 7-2-1 = 4 cuts, the other 1
    assert sorted(batch["target"].tolist()) == sorted([3, 9, 4, 2, 8])


def test_last_position_gathers_the_last_real_state_never_pad():
    states = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)  # (B, T, D)
    batch = {"lengths": torch.tensor([2, 4]), "target": torch.tensor([5, 6])}
    last, view = last_position(states, batch)
    assert torch.equal(last[:, 0], torch.stack([states[0, 1], states[1, 3]]))
    assert view["targets"].tolist() == [[5], [6]]
    assert view["mask"].all() and view["lengths"].tolist() == [1, 1]


@pytest.mark.filterwarnings(r"ignore:You are trying to `self.log\(\)`")  # no Trainer here
@pytest.mark.parametrize("empty_history", [False, True])
@pytest.mark.parametrize("encoder", ["self_attention", "gru", "frequency_attention"])
def test_prefix_loss_is_the_mean_of_each_sample_alone(encoder, empty_history):
    """A sample's loss does not depend on its batch mates or their padding: the batch loss is
    the mean of the samples' losses computed one at a time, each the cross-entropy of the last
    real state's scores against the target."""
    torch.manual_seed(0)
    options = {"name": encoder} if encoder == "gru" else {"name": encoder, "max_len": 8}
    spec = model_spec(
        {"name": "m", "encoder": options, "num_items": NUM_ITEMS, "embedding_dim": 16}
    )
    task = build_model(spec).eval()  # no dropout: the same forward pass twice
    data = sequences(random_histories(6, NUM_ITEMS, 12, seed=3), NUM_ITEMS)
    dataset = WindowDataset(data, Stage.TRAIN, 8, "prefixes", empty_history=empty_history)
    assert (dataset.lengths == 0).any() == empty_history
    collate = PaddedBatchCollator()
    rows = list(range(len(dataset)))
    together = task.training_step(collate(dataset.__getitems__(rows)), 0)
    alone = []
    for row in rows:
        batch = collate(dataset.__getitems__([row]))
        alone.append(task.training_step(batch, 0))
        states = task.model.encode(batch)[0, batch["lengths"][0] - 1]  # (D,)
        logits = states @ task.model.item_table[1:].T  # items 1..N, never PAD
        direct = F.cross_entropy(logits[None], batch["target"] - 1)
        torch.testing.assert_close(alone[-1], direct, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(together, torch.stack(alone).mean(), rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings(r"ignore:You are trying to `self.log\(\)`")  # no Trainer here
def test_an_empty_history_trains_the_encoder_not_only_the_item_table():
    """The PAD slot of an empty history carries the encoder's position (and, through it, every
    block's weights), as a left-padded window does in the S3-Rec line's code: its loss reaches
    the encoder, so the first-event samples teach it what users start with."""
    torch.manual_seed(0)
    spec = model_spec(
        {
            "name": "m",
            "encoder": {"name": "frequency_attention", "max_len": 8},
            "num_items": NUM_ITEMS,
            "embedding_dim": 16,
        }
    )
    task = build_model(spec)
    data = sequences([[7, 3, 9, 4, 2], [5, 8, 1, 6]], NUM_ITEMS)
    dataset = WindowDataset(data, Stage.TRAIN, 8, "prefixes", empty_history=True)
    empty = np.flatnonzero(dataset.lengths == 0).tolist()
    assert len(empty) == 2  # one per user
    batch = PaddedBatchCollator()(dataset.__getitems__(empty))
    assert batch["items"].tolist() == [[0], [0]] and batch["mask"].all()
    assert sorted(batch["target"].tolist()) == [5, 7]  # each user's first event
    task.training_step(batch, 0).backward()
    encoder_grads = [p.grad for p in task.model.encoder.parameters() if p.grad is not None]
    assert encoder_grads and any(g.abs().sum() > 0 for g in encoder_grads)
