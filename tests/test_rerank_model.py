"""Two-stage recommendation (rerank=topk) in memory: the candidates and the final ranking,
mined negatives and held-out windows in training, and the options a rerank spec refuses.
(Runs, checkpoints, serving and the one-command experiment: tests/test_rerank_runs.py.)"""

import numpy as np
import pytest
import torch

from recsys_seq.core.options import OptionError
from recsys_seq.data import PaddedBatchCollator, Stage, WindowDataset
from recsys_seq.metrics import target_rank
from recsys_seq.models import TwoStageTask, build_model, model_spec, rerank_spec
from recsys_seq.models.candidates import count_at_least
from recsys_seq.models.ranking import rankable_scores
from recsys_seq.models.spec import spec_values
from tests.helpers import random_histories, sequences

NUM_ITEMS = 40
K = 8


def specs(retriever_encoder: str = "self_attention", exclude_history: bool = True, **options):
    common = {"num_items": NUM_ITEMS, "embedding_dim": 16, "exclude_history": exclude_history}
    encoder = {"name": retriever_encoder}
    if retriever_encoder == "self_attention":
        encoder |= {"max_len": 12, "num_layers": 1, "num_heads": 1, "dropout": 0.0}
    retriever = model_spec({"name": "retriever", "encoder": encoder, **common})
    ranker = model_spec(
        {
            "name": "din",
            "encoder": {"name": "identity"},
            "scorer": {"name": "target_attention", "hidden": [8], "mlp_hidden": [8]},
            "loss": {"name": "candidate_bce", "num_negatives": 6, "cuts_per_window": 3},
            **common,
        }
    )
    return ranker, rerank_spec(retriever, {"candidates": K, **options}, ranker)


def two_stage(seed: int = 0, trained: bool = True, **kwargs) -> TwoStageTask:
    """A small pipeline; ``trained``: its ranker's own scores count (as after training; a
    fresh pipeline ranks exactly as its retriever)."""
    torch.manual_seed(seed)
    ranker, rerank = specs(**kwargs)
    task = build_model(ranker, rerank=rerank).eval()
    if trained and task.ranker_weight is not None:
        with torch.no_grad():
            task.ranker_weight.fill_(1.0)
    return task


def batches(stage: Stage, seed: int = 0, negatives: int = 0, batch_size: int = 16):
    data = sequences(random_histories(60, NUM_ITEMS, 12, seed=seed), num_items=NUM_ITEMS)
    dataset = WindowDataset(data, stage, max_len=12, sampled_negatives=negatives)
    collate = PaddedBatchCollator()
    order = np.arange(len(dataset))
    return [
        collate(dataset.__getitems__(order[i : i + batch_size].tolist()))
        for i in range(0, len(order), batch_size)
    ]


# -- the final ranking -------------------------------------------------------------------


@pytest.mark.parametrize("exclude_history", [True, False])
def test_candidates_are_the_retrievers_top_k_without_the_history(exclude_history):
    task = two_stage(exclude_history=exclude_history)
    seen_any = False
    with torch.no_grad():
        for batch in batches(Stage.TEST):
            exclude = batch["items"] if exclude_history else None
            both = task.candidates(batch, exclude)
            in_window = (both.items[:, :, None] == batch["items"][:, None, :]).any(-1)
            seen_any |= bool(in_window.any())
            if exclude_history:
                assert not in_window.any()
            assert (both.items != 0).all()  # PAD is never a candidate
            # exactly the K best retriever scores, best first
            expected = torch.topk(both.retriever_scores, K, dim=1).values
            got = both.retriever_scores.gather(1, both.items)
            torch.testing.assert_close(got, expected)
    assert seen_any != exclude_history  # without exclusion, history items do come back


def test_a_target_outside_the_top_k_keeps_its_retriever_rank():
    task = two_stage(seed=3)
    outside = inside = 0
    with torch.no_grad():
        for seed in range(3):
            for batch in batches(Stage.TEST, seed=seed):
                both = task.candidates(batch, batch["items"])
                target = batch["target"]
                final = both.positions(target[:, None])[:, 0]
                retriever = target_rank(both.retriever_scores, target)
                among = ((both.items == target[:, None]) & both.valid).any(1)
                assert torch.equal(final[~among], retriever[~among])
                assert (retriever[~among] >= K).all()
                assert (final[among] < K).all()
                outside += int((~among).sum())
                inside += int(among.sum())
    assert outside and inside  # both cases were met


def test_positions_are_the_rankers_order_of_the_candidates_then_the_retrievers():
    task = two_stage(seed=1, exclude_history=False)
    batch = batches(Stage.TEST)[0]
    with torch.no_grad():
        both = task.candidates(batch, None)
    everything = torch.arange(1, NUM_ITEMS + 1).expand(batch["items"].shape[0], -1)
    positions = both.positions(everything)  # (B, N): continuous scores, so no ties
    for row in range(positions.shape[0]):
        order = everything[row][positions[row].argsort()]
        by_ranker = both.items[row][both.ranker_scores[row].argsort(descending=True)]
        assert torch.equal(order[:K], by_ranker)
        rest = both.retriever_scores[row].argsort(descending=True)
        rest = rest[~torch.isin(rest, both.items[row]) & (rest != 0)]
        assert torch.equal(order[K:], rest)
        assert sorted(positions[row].tolist()) == list(range(NUM_ITEMS))


def test_count_at_least_is_one_rule_for_one_and_many_values():
    torch.manual_seed(0)
    scores = torch.randint(-3, 4, (5, 30)).float()
    scores[:, :4] = float("-inf")
    values = torch.cat([scores[:, 3:9], torch.full((5, 1), float("-inf"))], 1)
    many = count_at_least(scores, values)
    one_by_one = torch.cat([count_at_least(scores, values[:, [i]]) for i in range(7)], 1)
    reference = (scores[:, None, :] >= values[:, :, None]).sum(-1)
    assert torch.equal(many, reference) and torch.equal(one_by_one, reference)


@pytest.mark.parametrize("negatives", [0, 10])
def test_a_fresh_pipeline_is_an_identity_ranker_with_the_retrievers_metrics(negatives):
    task = two_stage(seed=2, trained=False)  # fresh: the ranker's score is the retriever's
    ranks = []
    with torch.no_grad():
        for batch in batches(Stage.TEST, negatives=negatives):
            task.test_step(batch, 0)
            scores = task.retriever.score_next(batch).float()
            ranks.append(target_rank(rankable_scores(scores, batch["items"]), batch["target"]))
    pipeline = task.test_metrics.compute()
    retriever = task.retriever_metrics["test"].compute()
    for key, value in pipeline.items():
        assert float(value) == pytest.approx(float(retriever[key]), abs=1e-12), key
    assert float(pipeline["ndcg@10"]) > 0
    if negatives:
        ours = task.test_sampled.compute()
        theirs = task.retriever_sampled["test"].compute()
        for key, value in ours.items():
            assert float(value) == pytest.approx(float(theirs[key]), abs=1e-12), key
    # within the candidates the ranker orders as the retriever: a target at retriever rank
    # r < K is above K - 1 - r of the other K - 1 candidates
    rank = torch.cat(ranks)
    among = rank[rank < K].double()
    expected = float(((K - 1 - among) / (K - 1)).mean())
    ranker = task.candidate_auc["ranker/test"].compute()
    assert float(ranker["auc"]) == pytest.approx(expected, abs=1e-12)
    retriever_auc = task.candidate_auc["retriever/test"].compute()
    assert all(float(ranker[k]) == float(retriever_auc[k]) for k in ("auc", "gauc"))


def test_an_overflowing_retriever_score_is_still_its_best_candidate():
    """+inf (an fp16 overflow) is the retriever's best item, not an empty slot: it stays a
    valid candidate, ranked and served first."""
    task = two_stage(seed=6, exclude_history=False)
    score_next = task.retriever.score_next

    def overflowing(batch):  # item 7 overflows for the even users
        scores = score_next(batch)
        scores[::2, 7] = float("inf")
        return scores

    task.retriever.score_next = overflowing
    with torch.no_grad():
        batch = batches(Stage.TEST)[0]
        both = task.candidates(batch, None)
        served = task.serve(batch, K, exclude_history=False)
    overflowed = both.retriever_scores[:, 7] == float("inf")
    assert overflowed.tolist() == [row % 2 == 0 for row in range(len(overflowed))]
    assert (both.items[overflowed, 0] == 7).all() and both.valid.all()
    assert (both.ranker_scores > float("-inf")).all()  # the mixed-in retriever score: +inf
    assert (served["items"][overflowed, 0] == 7).all()


def test_a_diverged_ranker_never_turns_a_candidate_into_a_hit():
    """NaN ranker scores rank as -inf: the target is last among the candidates (never a
    hit above the retriever's cut-off), and the pipeline's metrics stay finite."""
    task = two_stage(seed=5, exclude_history=False)
    for parameter in task.model.parameters():
        parameter.data.fill_(float("nan"))
    with torch.no_grad():
        for batch in batches(Stage.VAL):
            both = task.candidates(batch, None)
            assert torch.isneginf(both.ranker_scores).all()
            target = batch["target"][:, None]
            chosen = (both.items == target).any(1)
            assert (both.positions(target)[chosen, 0] == K - 1).all()
            task.validation_step(batch, 0)
    values = task.val_metrics.compute()
    assert all(float(v) == float(v) and abs(float(v)) <= 1 for v in values.values())
    assert float(values["hr@1"]) == 0.0


def test_the_pipeline_ranks_every_user_once_and_counts_candidate_recall():
    task = two_stage(seed=4)
    users = 0
    with torch.no_grad():
        for batch in batches(Stage.VAL):
            task.validation_step(batch, 0)
            users += batch["lengths"].shape[0]
    assert int(task.val_metrics.users) == users
    assert int(task.retriever_metrics["val"].users) == users
    assert f"hr@{K}" in task.retriever_metrics["val"].compute()


def tied_scores(network) -> None:
    """Gives ``network`` three distinct scores per user: item i scores ``(i % 3) * h_u``, so
    ten or more items tie at every cut-off, exactly in any kernel (a vector's one non-zero
    entry: the dot product is one product and zeros)."""
    with torch.no_grad():
        vectors = network.embedder.vectors.weight  # (N + 1, D)
        vectors.zero_()[:, 0] = torch.arange(len(vectors)) % 3


def reference_list(scores: torch.Tensor, k: int) -> list[int]:
    """A row's best ``k`` rankable items, equal scores by lower index (Python's stable sort)."""
    rankable = [i for i in range(len(scores)) if scores[i] > float("-inf")]
    return sorted(rankable, key=lambda i: -float(scores[i]))[:k]


@pytest.mark.parametrize("exclude_history", [True, False])
def test_a_users_candidates_and_served_list_never_depend_on_its_batch_mates(exclude_history):
    """``torch.topk`` picks among equal scores by the batch's shape: the candidates, the final
    ranking and the served list must be the same for a user alone and in any batch (else
    DDP's batch mates change the metrics), equal scores by lower item index."""
    task = two_stage(seed=2, exclude_history=exclude_history)
    tied_scores(task.retriever)
    one = build_model(specs(exclude_history=exclude_history)[1].retriever).eval()
    one.model.load_state_dict(task.retriever.state_dict())
    batch = batches(Stage.TEST, batch_size=32)[0]
    exclude = batch["items"] if exclude_history else None
    with torch.no_grad():
        together = task.candidates(batch, exclude)
        served = task.serve(batch, 2 * K, exclude_history)
        one_stage = one.serve(batch, K, exclude_history)
        for row in range(batch["items"].shape[0]):
            alone = {key: value[row : row + 1] for key, value in batch.items()}
            both = task.candidates(alone, alone["items"] if exclude_history else None)
            scores = both.retriever_scores[0]
            assert (scores == scores[both.items[0, -1]]).sum() > 1  # a tie at the cut-off
            assert both.items[0].tolist() == reference_list(scores, K)
            assert torch.equal(together.items[row], both.items[0])
            again = task.serve(alone, 2 * K, exclude_history)["items"][0]
            assert torch.equal(served["items"][row], again)
            assert (
                served["items"][row, K:].tolist()
                == [i for i in reference_list(scores, 2 * K) if i not in both.items[0].tolist()][:K]
            )
            assert one_stage["items"][row].tolist() == reference_list(scores, K)


# -- training ----------------------------------------------------------------------------


def reference_top(task, batch, cut, positive, exclude_history):
    """The retriever's top-K after window[:cut] by re-encoding that prefix alone."""
    items = batch["items"][:, :cut]
    prefix = {
        "items": items,
        "mask": batch["mask"][:, :cut],
        "lengths": torch.full_like(batch["lengths"], cut),
    }
    scores = task.retriever.score_next(prefix).float()
    scores[:, 0] = float("-inf")
    if exclude_history:
        scores = scores.scatter(1, items, float("-inf"))
    scores = scores.scatter(1, positive[:, None], float("-inf"))
    return scores.topk(K, dim=1).indices


@pytest.mark.parametrize("exclude_history", [True, False])
def test_mined_negatives_come_from_the_retrievers_view_of_that_cut_only(exclude_history):
    task = two_stage(seed=5, exclude_history=exclude_history)
    batch = batches(Stage.TRAIN, batch_size=64)[0]
    full = batch["lengths"] == batch["items"].shape[1]
    batch = {k: v[full] for k, v in batch.items()}  # windows without PAD: one cut for all
    length = batch["items"].shape[1]
    for cut_at in (1, length // 2, length):
        cut = torch.full((batch["items"].shape[0], 1), cut_at)
        positive = batch["targets"][:, cut_at - 1 : cut_at]
        with torch.no_grad():
            states = task.retriever.encode(batch)
            pool, valid = task.retriever_top(batch, task.retriever, states, cut, positive)
            expected = reference_top(task, batch, cut_at, positive[:, 0], exclude_history)
            # events after the cut do not change it: no peeking at the future
            later = dict(batch, items=batch["items"].clone())
            later["items"][:, cut_at:] = 1
            states = task.retriever.encode(later)
            again, _ = task.retriever_top(later, task.retriever, states, cut, positive)
        assert valid.all()
        assert torch.equal(pool[:, 0].sort(1).values, expected.sort(1).values)
        assert torch.equal(again, pool)


def test_mined_negatives_mix_hard_and_uniform_and_never_hold_the_positive():
    task = two_stage(seed=6, hard_negatives=0.5)
    torch.manual_seed(0)
    for batch in batches(Stage.TRAIN):
        cut, positive = task.loss.cuts(batch)
        with torch.no_grad():
            states = task.retriever.encode(batch)
            pool, valid = task.retriever_top(batch, task.retriever, states, cut, positive)
            negatives = task.mined_negatives(positive, pool, valid)
        assert negatives.shape == (*cut.shape, task.loss.num_negatives)
        assert (negatives != positive[..., None]).all()
        assert ((negatives >= 1) & (negatives <= NUM_ITEMS)).all()
        hard = round(0.5 * task.loss.num_negatives)
        mined = negatives[..., :hard]
        assert (mined[..., :, None] == pool[..., None, :]).any(-1).all()  # all from the top-K
        # drawn without replacement from the pool
        assert (mined.sort(-1).values.diff(dim=-1) != 0).all()


@pytest.mark.filterwarnings(r"ignore:You are trying to `self.log\(\)`")
def test_training_moves_the_ranker_only(demo_dir):
    task = two_stage(seed=7, trained=False)
    task.train()
    assert not task.retriever.training and task.model.training
    frozen = {k: v.clone() for k, v in task.retriever.state_dict().items()}
    ranker = {k: v.clone() for k, v in task.model.state_dict().items()}
    optimizer = torch.optim.AdamW([p for p in task.parameters() if p.requires_grad], lr=0.01)
    for batch in batches(Stage.TRAIN)[:3]:
        optimizer.zero_grad()
        task.training_step(batch, 0).backward()
        optimizer.step()
    assert all(torch.equal(v, task.retriever.state_dict()[k]) for k, v in frozen.items())
    assert any(not torch.equal(v, task.model.state_dict()[k]) for k, v in ranker.items())
    # both weights are learned: the ranker's own score from 0, the retriever's from 1
    assert task.ranker_weight.item() != 0.0 and task.score_weight.item() != 1.0


@pytest.mark.parametrize("held", [1, 3])
@pytest.mark.parametrize("max_len", [4, 12])
def test_held_out_events_are_the_rankers_targets_and_never_the_retrievers(held, max_len):
    data = sequences(random_histories(80, NUM_ITEMS, 20, seed=held), num_items=NUM_ITEMS)
    retriever = WindowDataset(data, Stage.TRAIN, max_len, train_holdout=held)
    ranker = WindowDataset(data, Stage.TRAIN, max_len, train_windows="holdout", train_holdout=held)
    starts = data.offsets[:-1]
    for user in range(len(data.users)):
        end = data.train_end[user]
        held_out = set(range(max(end - held, 1), end))  # positions in the user's history
        mine = retriever.users == user
        # the retriever's windows: every target before the held-out events, none of them
        targets = {
            t
            for s, n in zip(retriever.starts[mine], retriever.lengths[mine], strict=True)
            for t in range(s + 1 - starts[user], s + n + 1 - starts[user])
        }
        assert targets == set(range(1, max(end - held, 1)))
        # the ranker's: one window per held-out event, its input the events just before it
        rows = np.flatnonzero(ranker.users == user)
        windows = ranker.__getitems__(rows.tolist()) if len(rows) else None
        got = (
            set()
            if windows is None
            else set((ranker.starts[rows] + ranker.lengths[rows] - starts[user]).tolist())
        )
        assert got == held_out
        if windows is not None:
            assert windows.next_items is None
            history = data.items[starts[user] : starts[user] + end]
            assert windows.target.tolist() == [history[p] for p in sorted(held_out)]
            assert (windows.lengths.numpy() == np.minimum(sorted(held_out), max_len)).all()


@pytest.mark.filterwarnings(r"ignore:You are trying to `self.log\(\)`")
@pytest.mark.parametrize("objective", ["bce", "softmax"])
def test_a_held_out_batch_trains_the_ranker_on_its_whole_window(objective):
    task = two_stage(seed=9, objective=objective)
    data = sequences(random_histories(40, NUM_ITEMS, 12, seed=1), num_items=NUM_ITEMS)
    dataset = WindowDataset(data, Stage.TRAIN, 12, train_windows="holdout", train_holdout=1)
    batch = PaddedBatchCollator()(dataset.__getitems__(list(range(len(dataset)))))
    assert "targets" not in batch
    task.train()

    def loss() -> torch.Tensor:
        torch.manual_seed(0)  # the same negatives every time
        return task.training_step(batch, 0)

    before = loss()
    optimizer = torch.optim.Adam([p for p in task.parameters() if p.requires_grad], lr=0.01)
    for _ in range(20):
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()
    assert task.model.embedder.items.weight.grad.abs().sum() > 0
    assert loss() < 0.8 * before  # it learns the held-out targets


# -- options -----------------------------------------------------------------------------


def test_the_rerank_spec_refuses_what_cannot_work():
    ranker, rerank = specs()
    with pytest.raises(OptionError, match="dot product"):
        rerank_spec(ranker, {}, ranker)  # DIN as the retriever
    with pytest.raises(OptionError, match="other items"):
        other = model_spec({**spec_values(rerank.retriever), "num_items": NUM_ITEMS + 1})
        rerank_spec(other, {}, ranker)
    with pytest.raises(OptionError, match="candidate_bce"):
        rerank_spec(rerank.retriever, {}, rerank.retriever)  # sasrec as the ranker
    with pytest.raises(OptionError, match="more than the"):
        rerank_spec(rerank.retriever, {"candidates": NUM_ITEMS + 1}, ranker)
    for bad in ({"candidates": 0}, {"hard_negatives": 1.5}, {"stray": 1}):
        with pytest.raises(OptionError):
            rerank_spec(rerank.retriever, bad, ranker)
