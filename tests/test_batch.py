"""Windows, collate and masks: what a model sees is exactly the data, padding only on the right."""

import numpy as np
import torch

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
