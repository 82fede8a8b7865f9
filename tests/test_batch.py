"""Windows, collate and masks: what a model sees is exactly the data, padding only on the right."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from recsys_seq.data import IGNORE_INDEX, PaddedBatchCollator, Stage, WindowDataset
from tests.helpers import sequences

HISTORIES = [[7, 3, 9, 4, 2], [5, 8, 1, 6], [2, 6, 1, 5, 9, 3, 8]]


def batch(stage, max_len=10, indices=(0, 1, 2), pad_to=None):
    dataset = WindowDataset(sequences(HISTORIES), stage, max_len)
    return PaddedBatchCollator(pad_to)(dataset.__getitems__(list(indices)))


def test_train_windows_shift_by_one_and_stop_before_validation():
    b = batch(Stage.TRAIN)
    # user 0: train events [7, 3, 9] -> inputs [7, 3], next items [3, 9]
    assert b["items"].tolist() == [[7, 3, 0, 0], [5, 0, 0, 0], [2, 6, 1, 5]]
    ignore = IGNORE_INDEX
    assert b["targets"].tolist() == [
        [3, 9, ignore, ignore],
        [8, ignore, ignore, ignore],
        [6, 1, 5, 9],
    ]
    assert b["lengths"].tolist() == [2, 1, 4]


def test_mask_is_true_exactly_on_real_events():
    b = batch(Stage.TRAIN)
    assert b["mask"].dtype == torch.bool
    assert torch.equal(b["mask"], b["items"] != 0)
    assert torch.equal(b["mask"].sum(1), b["lengths"])


def test_eval_windows_hold_out_the_next_item():
    val, test = batch(Stage.VAL), batch(Stage.TEST)
    assert val["target"].tolist() == [4, 1, 3]
    assert test["target"].tolist() == [2, 6, 8]
    assert test["items"][2].tolist() == [2, 6, 1, 5, 9, 3]
    assert "targets" not in test


def test_truncation_keeps_the_most_recent_events():
    b = batch(Stage.TEST, max_len=3)
    assert b["items"].tolist() == [[3, 9, 4], [5, 8, 1], [5, 9, 3]]
    t = batch(Stage.TRAIN, max_len=2)
    assert t["items"][2].tolist() == [1, 5] and t["targets"][2].tolist() == [5, 9]


def test_pads_to_batch_longest_or_multiple():
    assert batch(Stage.TEST, indices=(0, 1))["items"].shape == (2, 4)
    padded = batch(Stage.TEST, indices=(0, 1), pad_to=8)
    assert padded["items"].shape == (2, 8) and padded["mask"].sum() == 7


def test_side_features_are_parallel_to_items():
    b = batch(Stage.TEST)
    expected = torch.where(b["mask"], b["items"] % 3 + 1, 0)
    assert torch.equal(b["category"], expected)


def test_users_without_training_pairs_are_left_out_of_training():
    data = sequences([[1, 2, 3], [4, 5, 6, 7]])
    train = WindowDataset(data, Stage.TRAIN, 10)
    assert train.users.tolist() == [1]
    assert len(WindowDataset(data, Stage.TEST, 10)) == 2
    np.testing.assert_array_equal(WindowDataset(data, Stage.VAL, 10).lengths, [1, 2])


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 23), min_size=1, max_size=8),
    max_len=st.integers(1, 7),
)
def test_all_training_windows_make_every_training_event_a_target_exactly_once(lengths, max_len):
    """``train_windows=all`` cuts each training history from its end into windows of at
    most max_len targets: together they hold every (previous event, event) pair of the
    training history once, in order; ``last`` keeps the most recent window alone."""
    histories = [list(range(100 * u + 1, 100 * u + 1 + n)) for u, n in enumerate(lengths)]
    data = sequences(histories, num_items=1000)
    every = WindowDataset(data, Stage.TRAIN, max_len, train_windows="all")
    last = WindowDataset(data, Stage.TRAIN, max_len, train_windows="last")
    assert (every.lengths >= 1).all() and (every.lengths <= max_len).all()
    for user, history in enumerate(histories):
        train = history[: max(len(history) - 2, 0)]
        rows = np.flatnonzero(every.users == user)
        pairs = []
        for row in rows[::-1]:  # earliest window first
            window = every.__getitems__([row])
            pairs += list(zip(window.items.tolist(), window.next_items.tolist(), strict=True))
        assert pairs == list(zip(train, train[1:], strict=False))
        full = every.lengths[rows[:-1]]  # all but the earliest window hold max_len targets
        assert full.tolist() == [max_len] * (len(rows) - 1)
        (mine,) = np.flatnonzero(last.users == user) if len(train) >= 2 else (None,)
        if mine is not None:
            window = last.__getitems__([mine])
            assert window.next_items.tolist() == train[1:][-max_len:]


def test_window_lengths_are_held_narrow_and_batched_as_int64():
    """Each rank holds its windows' lengths in 32 bits (a window is at most max_len), and every
    stage's batch still carries them as int64, as models and masks expect."""
    for stage in Stage:
        dataset = WindowDataset(sequences(HISTORIES), stage, max_len=3)
        assert dataset.lengths.dtype == np.int32
        windows = dataset.__getitems__(list(range(len(dataset))))
        assert windows.lengths.dtype == torch.int64
        assert windows.lengths.tolist() == dataset.lengths.tolist()
