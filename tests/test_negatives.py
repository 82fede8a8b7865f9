"""Fixed sampled negatives: outside the user's history, reproducible, used under their own key."""

import numpy as np
import pytest
import torch

from recsys_seq.data import PaddedBatchCollator, Stage, WindowDataset
from recsys_seq.data.negatives import sample_negatives
from recsys_seq.metrics import target_rank
from tests.helpers import random_histories, sequences


def test_negatives_avoid_history_and_are_reproducible():
    data = sequences(random_histories(200, 60, 40, seed=3), num_items=60)
    users = data.users
    first = sample_negatives(data.history_keys(), users, 60, 100, seed=7)
    again = sample_negatives(data.history_keys(), users, 60, 100, seed=7)
    np.testing.assert_array_equal(first, again)
    assert first.shape == (200, 100) and first.min() >= 1 and first.max() <= 60
    for u in range(200):
        history = set(data.items[data.offsets[u] : data.offsets[u + 1]].tolist())
        assert not history & set(first[u].tolist())


def test_popularity_negatives_follow_the_weights():
    keys = np.array([], dtype=np.int64)
    weights = np.array([0, 0, 0, 1, 9], dtype=np.float64)  # items 3 and 4 only, 1:9
    drawn = sample_negatives(keys, np.arange(50), 4, 200, seed=0, item_weights=weights)
    assert set(np.unique(drawn).tolist()) == {3, 4}
    assert 0.85 < (drawn == 4).mean() < 0.95


def test_impossible_draw_is_a_clear_error():
    data = sequences([[1, 2, 3], [1, 2, 3]], num_items=3)
    with pytest.raises(ValueError, match="negatives outside the history"):
        sample_negatives(data.history_keys(), data.users, 3, 5, seed=0)


def test_eval_batches_carry_the_same_negatives_for_every_model():
    data = sequences(random_histories(30, 80, 20, seed=1), num_items=80)
    a = WindowDataset(data, Stage.TEST, 10, sampled_negatives=100, negatives_seed=5)
    b = WindowDataset(data, Stage.TEST, 10, sampled_negatives=100, negatives_seed=5)
    batch = PaddedBatchCollator()(a.__getitems__([3, 1, 2]))
    assert batch["negatives"].shape == (3, 100)
    np.testing.assert_array_equal(a.negatives, b.negatives)
    assert WindowDataset(data, Stage.TRAIN, 10, sampled_negatives=100).negatives is None
    # the sampled rank is the rank among target + negatives only
    scores = torch.randn(3, 81)
    candidates = torch.cat([batch["target"][:, None], batch["negatives"]], 1)
    rank = target_rank(scores.gather(1, candidates), torch.zeros(3, dtype=torch.long))
    assert (rank <= 100).all()


def test_eval_users_are_one_fixed_sample_shared_by_validation_and_test():
    data = sequences(random_histories(40, 80, 20, seed=2), num_items=80)
    full = WindowDataset(data, Stage.TEST, 10, sampled_negatives=20)
    val, test = (
        WindowDataset(data, stage, 10, sampled_negatives=20, eval_users=7, eval_users_seed=3)
        for stage in (Stage.VAL, Stage.TEST)
    )
    assert len(test) == 7
    np.testing.assert_array_equal(val.users, test.users)
    other_seed = WindowDataset(data, Stage.TEST, 10, eval_users=7, eval_users_seed=4)
    assert set(other_seed.users) != set(test.users)
    # a sampled user keeps exactly their full-evaluation window, target and negatives
    rows = np.searchsorted(full.users, test.users)
    sampled = PaddedBatchCollator()(test.__getitems__(list(range(7))))
    reference = PaddedBatchCollator()(full.__getitems__(rows.tolist()))
    for key in ("items", "target", "negatives", "lengths"):
        torch.testing.assert_close(sampled[key], reference[key])
    # training always sees everyone
    train = WindowDataset(data, Stage.TRAIN, 10, eval_users=7)
    assert len(train) == len(WindowDataset(data, Stage.TRAIN, 10)) > 7
    with pytest.raises(ValueError, match="eval_users"):
        WindowDataset(data, Stage.TEST, 10, eval_users=0)
