"""Ranking metrics against a brute-force reference, ties and DDP-style merging included."""

import math

import numpy as np
import pytest
import torch

from recsys_seq.metrics import RankingMetrics, target_rank


def reference(scores: np.ndarray, target: np.ndarray, ks) -> dict[str, float]:
    """One user at a time, straight from the definitions (pessimistic ties)."""
    out = {f"{m}@{k}": 0.0 for m in ("hr", "ndcg", "mrr") for k in ks}
    for row, t in zip(scores, target, strict=True):
        rank = sum(1 for j, s in enumerate(row) if j != t and s >= row[t])
        for k in ks:
            if rank < k:
                out[f"hr@{k}"] += 1
                out[f"ndcg@{k}"] += 1 / math.log2(rank + 2)
                out[f"mrr@{k}"] += 1 / (rank + 1)
    return {name: value / len(target) for name, value in out.items()}


@pytest.mark.parametrize("levels", [3, 1000])  # 3 score levels: ties everywhere
def test_metrics_match_brute_force(levels):
    rng = np.random.default_rng(levels)
    scores = rng.integers(0, levels, size=(64, 40)).astype(np.float32)
    target = rng.integers(0, 40, size=64)
    ks = (1, 5, 10, 20)
    metric = RankingMetrics(ks)
    metric.update(target_rank(torch.from_numpy(scores), torch.from_numpy(target)))
    got = {k: v.item() for k, v in metric.compute().items()}
    expected = reference(scores, target, ks)
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name] == pytest.approx(expected[name], abs=1e-12), name


def test_ties_are_pessimistic():
    scores = torch.zeros(1, 10)
    assert target_rank(scores, torch.tensor([3])).item() == 9


def test_excluded_target_is_never_a_hit():
    scores = torch.arange(5.0)[None].repeat(1, 1)
    scores[0, 4] = float("-inf")
    scores[0, 0] = float("-inf")
    assert target_rank(scores, torch.tensor([4])).item() == 4


def test_a_nan_score_ranks_last_and_is_never_a_hit():
    """A diverged model's NaN compares false with everything: as a target it would count
    nobody above it (a hit at every K, NDCG 1/log2(1) = inf); as another item it would never
    be counted above the target. Both rank as -inf instead."""
    nan = float("nan")
    scores = torch.tensor([[nan, nan, nan], [0.0, nan, 1.0], [nan, 2.0, 1.0], [nan, 2.0, nan]])
    target = torch.tensor([0, 1, 2, 2])
    assert target_rank(scores, target).tolist() == [2, 2, 1, 2]
    metric = RankingMetrics(ks=(1, 2, 3))
    metric.update(target_rank(scores, target))
    values = {k: float(v) for k, v in metric.compute().items()}
    assert all(math.isfinite(v) for v in values.values())
    assert values["hr@1"] == 0.0 and values["hr@2"] == 0.25 and values["hr@3"] == 1.0


def test_split_updates_equal_one_update():
    """Sum-and-count states: any partition of users (batches, ranks) gives the same result."""
    rng = np.random.default_rng(0)
    ranks = torch.from_numpy(rng.integers(0, 30, size=101))
    whole = RankingMetrics((1, 10))
    whole.update(ranks)
    parts = [RankingMetrics((1, 10)) for _ in range(3)]
    for part, chunk in zip(parts, ranks.tensor_split(3), strict=True):
        part.update(chunk)
    merged = parts[0]
    for other in parts[1:]:
        merged.merge_state(other)
    for name, value in whole.compute().items():
        assert merged.compute()[name].item() == pytest.approx(value.item(), abs=1e-12)


def test_rejects_bad_cutoffs():
    with pytest.raises(ValueError, match="positive"):
        RankingMetrics((0, 5))
