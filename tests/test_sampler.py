"""Properties of the bucket batch sampler over random lengths and world sizes 1-8."""

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recsys_seq.core.options import OptionError
from recsys_seq.data import BucketBatchSampler, SequenceDataModule

lengths_st = st.lists(st.integers(1, 300), min_size=1, max_size=400)
world_st = st.integers(1, 8)
budget_st = st.one_of(st.none(), st.integers(1, 2000))
grouped_st = st.booleans()  # length-grouped batches, or random ones (data.batching)


def shards(lengths, world, epoch=0, seed=0, **options):
    per_rank = []
    for rank in range(world):
        sampler = BucketBatchSampler(
            lengths, seed=seed, num_replicas=world, rank=rank, batch_size=8, **options
        )
        sampler.set_epoch(epoch)
        per_rank.append(list(sampler))
        assert len(sampler) == len(per_rank[-1])
    return per_rank


@settings(max_examples=150, deadline=None)
@given(lengths=lengths_st, world=world_st, budget=budget_st, grouped=grouped_st)
def test_training_shards_are_equal_disjoint_and_complete(lengths, world, budget, grouped):
    per_rank = shards(lengths, world, max_tokens=budget, group_by_length=grouped)
    assert len({len(batches) for batches in per_rank}) == 1, "every rank runs the same steps"
    seen = Counter(i for batches in per_rank for batch in batches for i in batch)
    assert set(seen) == set(range(len(lengths))), "every sample is used"
    unsharded = len(
        BucketBatchSampler(lengths, batch_size=8, max_tokens=budget, group_by_length=grouped)
    )
    if len(lengths) >= -(-unsharded // world) * world:  # enough samples to split batches
        assert max(seen.values()) == 1, "no sample is used twice (ranks are disjoint)"


@settings(max_examples=150, deadline=None)
@given(lengths=lengths_st, world=world_st)
def test_evaluation_counts_every_sample_exactly_once(lengths, world):
    per_rank = shards(lengths, world, shuffle=False, allow_repeats=False)
    flat = [i for batches in per_rank for batch in batches for i in batch]
    assert sorted(flat) == list(range(len(lengths)))
    if len(lengths) >= world:  # every rank takes part in the collective metric reduction
        assert all(per_rank)
    alone = list(BucketBatchSampler(lengths, batch_size=8, shuffle=False, allow_repeats=False))
    if len(alone) >= world:  # each user among the batch mates one process gives it
        assert sorted(b for batches in per_rank for b in batches) == sorted(alone)
        assert max(map(len, per_rank)) - min(map(len, per_rank)) <= 1


@settings(max_examples=150, deadline=None)
@given(lengths=lengths_st, budget=st.integers(1, 2000), grouped=grouped_st)
def test_token_budget_is_never_exceeded_but_by_a_lone_long_window(lengths, budget, grouped):
    lengths = np.asarray(lengths)
    for batch in BucketBatchSampler(lengths, max_tokens=budget, group_by_length=grouped):
        slots = len(batch) * lengths[batch].max()
        assert slots <= budget or len(batch) == 1


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=50, max_size=400),
    world=world_st,
    grouped=grouped_st,
)
def test_order_is_deterministic_per_epoch_and_changes_across_epochs(lengths, world, grouped):
    def order(epoch):
        return shards(lengths, world, epoch=epoch, group_by_length=grouped)

    assert order(3) == order(3)
    assert order(3) != order(4)


def test_bucketed_batches_have_near_equal_lengths():
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.pareto(1.2, 20_000).astype(int) + 3, 200)
    sampler = BucketBatchSampler(lengths, batch_size=128)
    real = slots = 0
    for batch in sampler:
        real += lengths[batch].sum()
        slots += len(batch) * lengths[batch].max()
    assert real / slots >= 0.95


def test_random_batches_mix_lengths_that_grouped_batches_keep_apart():
    """data.batching=random: batch mates are a random draw, so their lengths spread as the
    whole data's do; with length grouping they are almost equal."""
    lengths = np.random.default_rng(0).integers(1, 51, 20_000)

    def mean_spread(sampler):
        return np.mean([np.ptp(lengths[batch]) for batch in sampler])

    assert mean_spread(BucketBatchSampler(lengths, batch_size=128)) < 2
    assert mean_spread(BucketBatchSampler(lengths, batch_size=128, group_by_length=False)) > 45


def test_only_training_batches_follow_data_batching(demo_dir):
    data = SequenceDataModule(demo_dir, max_len=30, batching="random")
    assert not data.dataloader("train", num_replicas=1, rank=0).batch_sampler.group_by_length
    for stage in ("val", "test"):
        assert data.dataloader(stage, num_replicas=1, rank=0).batch_sampler.group_by_length
    grouped = SequenceDataModule(demo_dir, max_len=30)
    assert grouped.dataloader("train", num_replicas=1, rank=0).batch_sampler.group_by_length


def test_fewer_users_to_evaluate_than_processes_is_refused_not_a_hang(demo_dir):
    """A rank without an evaluation batch skips evaluation while the others wait for its
    metric reduction: refused, naming the counts; training and one process are unaffected."""
    data = SequenceDataModule(demo_dir, max_len=30)
    users = len(data.dataset("test").lengths)
    for stage in ("val", "test"):
        with pytest.raises(OptionError, match=rf"{users} {stage} users for {users + 1} processes"):
            data.dataloader(stage, num_replicas=users + 1, rank=0)
        assert data.dataloader(stage, num_replicas=users, rank=users - 1).batch_sampler.rank
    assert len(data.dataloader("train", num_replicas=users + 1, rank=0)) > 0


def test_the_datamodule_takes_prep_suggested_buckets_when_asked(demo_dir):
    suggested = json.loads((demo_dir / "meta.json").read_text())["suggested_buckets"]
    chosen = SequenceDataModule(demo_dir, max_len=30, boundaries="suggested")
    assert chosen.bucket_boundaries() == [b for b in suggested if b < 30] + [30]
    assert SequenceDataModule(demo_dir, max_len=30).bucket_boundaries() is None  # geometric
    assert SequenceDataModule(demo_dir, boundaries=[4, 9]).bucket_boundaries() == [4, 9]
    loader = chosen.dataloader("train", num_replicas=1, rank=0)
    assert loader.batch_sampler.boundaries.tolist() == chosen.bucket_boundaries()


@settings(max_examples=50, deadline=None)
@given(lengths=lengths_st, world=world_st, budget=budget_st)
def test_the_batches_do_not_depend_on_how_lengths_are_stored(lengths, world, budget):
    """A list, int64, int32 (what datasets hold) or uint16 lengths give the same shards: the
    sampler keeps the dataset's own array instead of a per-rank int64 copy."""
    expected = shards(lengths, world, max_tokens=budget)
    for dtype in (np.int64, np.int32, np.uint16):
        assert shards(np.asarray(lengths, dtype=dtype), world, max_tokens=budget) == expected


def test_the_sampler_holds_the_datasets_lengths_and_one_byte_bucket_ids():
    lengths = np.random.default_rng(0).integers(1, 200, 1000).astype(np.int32)
    sampler = BucketBatchSampler(lengths, batch_size=8)
    assert sampler.lengths is lengths
    assert sampler.bucket_of.itemsize == 1
