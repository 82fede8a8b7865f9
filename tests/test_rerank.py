"""Two-stage recommendation (rerank=topk): candidates, the final ranking, mined negatives,
metrics beside the retriever's, checkpoints, serving and the one-command experiment."""

import copy
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

import recsys_seq
from data_prep import schema
from recsys_seq.checkpoint import CheckpointError, VocabularyMismatch, load, open_checkpoint
from recsys_seq.core.options import OptionError
from recsys_seq.data import PaddedBatchCollator, Stage, WindowDataset
from recsys_seq.metrics import target_rank
from recsys_seq.models import TwoStageTask, build_model, model_spec, rerank_spec
from recsys_seq.models.ranking import rankable_scores
from recsys_seq.models.spec import spec_values
from recsys_seq.models.two_stage import count_at_least
from recsys_seq.workflows import runs
from recsys_seq.workflows.evaluate import evaluate
from recsys_seq.workflows.export import TwoStageRanker, example_inputs, export
from recsys_seq.workflows.recommend import recommend
from recsys_seq.workflows.train import train
from tests.helpers import random_histories, sequences
from tests.test_train import (  # noqa: F401 (demo_dir is a fixture)
    compose_config,
    demo_dir,  # noqa: F811
    short_checkpoint,
    train_config,
)

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
            pool, valid = task.retriever_top(batch, task.retriever.encode(batch), cut, positive)
            expected = reference_top(task, batch, cut_at, positive[:, 0], exclude_history)
            # events after the cut do not change it: no peeking at the future
            later = dict(batch, items=batch["items"].clone())
            later["items"][:, cut_at:] = 1
            again, _ = task.retriever_top(later, task.retriever.encode(later), cut, positive)
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
            negatives = task.mined_negatives(batch, states, cut, positive)
            pool, _ = task.retriever_top(batch, states, cut, positive)
        assert negatives.shape == (*cut.shape, task.loss.num_negatives)
        assert (negatives != positive[..., None]).all()
        assert ((negatives >= 1) & (negatives <= NUM_ITEMS)).all()
        hard = round(0.5 * task.loss.num_negatives)
        mined = negatives[..., :hard]
        assert (mined[..., :, None] == pool[..., None, :]).any(-1).all()  # all from the top-K
        # drawn without replacement from the pool
        assert (mined.sort(-1).values.diff(dim=-1) != 0).all()


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\(\)`")
def test_training_moves_the_ranker_only(demo_dir):  # noqa: F811
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


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\(\)`")
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


def _user_indices(prepared: Path) -> dict:
    users = pl.read_parquet(prepared / schema.USERS_FILE)
    return dict(zip(users[schema.ORIGINAL_ID].to_list(), users[schema.USER].to_list(), strict=True))


# -- end to end --------------------------------------------------------------------------

SHORT = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=2",
    "logger=[]",
]


@pytest.fixture(scope="module")
def retriever_ckpt(tmp_path_factory, demo_dir):  # noqa: F811
    return short_checkpoint(
        tmp_path_factory.mktemp("retriever"),
        demo_dir,
        "model.exclude_history=true",
        "data.train_holdout=1",  # fits rankers with rerank.holdout=1 too
    )


def rerank_run(run_dir, demo_dir, *overrides):  # noqa: F811
    return train_config(
        run_dir, demo_dir, "model=din", "rerank=topk", "rerank.candidates=20", *SHORT, *overrides
    )


def test_a_two_stage_run_logs_pipeline_retriever_and_ranker_and_serves(
    tmp_path,
    demo_dir,  # noqa: F811
    retriever_ckpt,  # noqa: F811
):
    run_dir = tmp_path / "run"
    metrics, objects = train(
        rerank_run(
            run_dir,
            demo_dir,
            f"rerank.retriever.ckpt_path={retriever_ckpt}",
            "model.exclude_history=true",
        )
    )
    for key in (
        "test/ndcg@10",
        "retriever/test/ndcg@10",
        "retriever/test/hr@20",
        "ranker/test/auc",
    ):
        assert 0.0 <= metrics[key] <= 1.0, key
    saved = json.loads((run_dir / "metrics.json").read_text())
    assert saved["retriever/test/hr@20"] == pytest.approx(metrics["retriever/test/hr@20"])

    # the checkpoint rebuilds the pipeline, retriever weights included, and evaluates the same
    checkpoint = Path(metrics["checkpoint"])
    task = load(checkpoint)
    assert isinstance(task, TwoStageTask) and task.num_candidates == 20
    eval_cfg = [f"ckpt_path={checkpoint}", "trainer.limit_test_batches=2"]  # as the run tested
    again, _ = evaluate(compose_config("eval", tmp_path / "eval", eval_cfg))
    for key in ("test/ndcg@10", "retriever/test/ndcg@10", "ranker/test/gauc", "retriever/test/auc"):
        assert again[key] == pytest.approx(metrics[key], abs=1e-6), key

    # serving: the ranker's order of the candidates, then the retriever's, never the history
    model = recsys_seq.load(checkpoint)
    history = model.catalogue.ids(np.arange(1, 6)).to_list()
    top = model.recommend(history, k=30)
    assert len(top.items) == 30 and not set(top.items) & set(history)
    assert top.scores[:20] == sorted(top.scores[:20], reverse=True)

    # recsys-recommend serves the final ranking: its top 5 hit as often as evaluation says
    full, _ = evaluate(compose_config("eval", tmp_path / "full", [f"ckpt_path={checkpoint}"]))
    frame, info = recommend(
        compose_config(
            "recommend",
            tmp_path / "rec",
            [f"ckpt_path={checkpoint}", "stage=test", "k=5", f"output={tmp_path / 'recs.parquet'}"],
        ),
        show_progress=False,
    )
    targets = {}
    for batch in info["datamodule"].dataloader("test", num_replicas=1, rank=0):
        targets |= dict(zip(batch["user"].tolist(), batch["target"].tolist(), strict=True))
    items = pl.read_parquet(info["datamodule"].path / schema.ITEMS_FILE)
    index_of = dict(
        zip(items[schema.ORIGINAL_ID].to_list(), items[schema.ITEM].to_list(), strict=True)
    )
    user_index = _user_indices(info["datamodule"].path)
    hits = sum(
        targets[user_index[user]] in {index_of[i] for i in group["item_id"]}
        for (user,), group in frame.group_by("user_id")
    )
    assert frame.group_by("user_id").len()["len"].max() == 5
    assert hits / len(targets) == pytest.approx(full["test/hr@5"], abs=1e-9)

    # the exported program gives the eager model's candidates in the same order
    output = tmp_path / "pipeline.pt2"
    export(
        compose_config(
            "export",
            tmp_path / "export",
            [f"ckpt_path={checkpoint}", f"output={output}", "exclude_history=true"],
        )
    )
    program = torch.export.load(output).module()
    for size, length in ((1, 3), (5, 7)):
        inputs = example_inputs(TwoStageRanker(task, exclude_history=True), size, length, seed=size)
        with torch.no_grad():
            expected_items, expected_scores = TwoStageRanker(task, exclude_history=True)(*inputs)
            items, scores = program(*inputs)
        assert torch.equal(items, expected_items)
        torch.testing.assert_close(scores, expected_scores)
        assert not (items[:, :, None] == inputs[0][:, None, :]).any()


def test_one_command_trains_the_retriever_then_reuses_it(tmp_path, demo_dir):  # noqa: F811
    run_dir = tmp_path / "run"
    overrides = [
        "baselines=false",
        "rerank.retriever.experiment=s3rec_beauty_sasrec",
        f"rerank.retriever.overrides=['data.path={demo_dir}','data.source=null','trainer.max_epochs=1']",
    ]
    metrics, _ = train(rerank_run(run_dir, demo_dir, *overrides, "rerank.holdout=1"))
    retriever = json.loads((run_dir / "retriever" / "metrics.json").read_text())
    assert retriever["fit/epochs"] == 1  # its own overrides apply
    # it never trained on the events the ranker trains on
    assert open_checkpoint(retriever["checkpoint"]).data.train_holdout == 1
    assert open_checkpoint(metrics["checkpoint"]).data.train_windows == "holdout"
    assert not any(k.startswith("popularity/") for k in retriever)  # how the command runs
    assert Path(retriever["checkpoint"]).is_relative_to(run_dir / "retriever")
    assert metrics["retriever/test/ndcg@10"] >= 0
    train(rerank_run(run_dir, demo_dir, *overrides, "rerank.holdout=1"))  # the rerun reuses it
    assert json.loads((run_dir / "retriever" / "metrics.json").read_text()) == retriever


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ([], "exactly one of ckpt_path"),
        (
            [
                "rerank.retriever.ckpt_path=x.ckpt",
                "rerank.retriever.experiment=s3rec_beauty_sasrec",
            ],
            "exactly one",
        ),
        (
            ["rerank.retriever.ckpt_path=x.ckpt", "rerank.retriever.overrides=['seed=1']"],
            "experiment only",
        ),
        (["rerank.retriever.ckpt_path=/nonexistent/best.ckpt"], "does not exist"),
        (["rerank.retriever.experiment=s3rec_beauty_sasrec"], "same prepared data"),
        (
            ["data.train_holdout=0", "rerank.holdout=0", "data.train_windows=holdout"],
            "set data.train_holdout",
        ),
    ],
)
def test_wrong_retrievers_are_refused_before_training(tmp_path, demo_dir, overrides, error):  # noqa: F811
    with pytest.raises((OptionError, CheckpointError), match=error):
        train(rerank_run(tmp_path / "run", demo_dir, *overrides))
    assert not (tmp_path / "run" / ".recsys-seq.json").exists()  # not even claimed


def test_a_retriever_of_other_items_or_two_stages_is_refused(tmp_path, demo_dir, retriever_ckpt):  # noqa: F811
    payload = torch.load(retriever_ckpt, weights_only=True)
    payload["recsys_seq"]["model"]["item_fingerprint"] = "0" * 64
    payload["recsys_seq"]["catalogue"] = None  # (its catalogue would no longer match either)
    foreign = tmp_path / "foreign.ckpt"
    torch.save(payload, foreign)
    with pytest.raises(VocabularyMismatch):
        train(rerank_run(tmp_path / "a", demo_dir, f"rerank.retriever.ckpt_path={foreign}"))
    metrics, _ = train(
        rerank_run(tmp_path / "b", demo_dir, f"rerank.retriever.ckpt_path={retriever_ckpt}")
    )
    with pytest.raises(CheckpointError, match="two-stage"):
        train(
            rerank_run(
                tmp_path / "c", demo_dir, f"rerank.retriever.ckpt_path={metrics['checkpoint']}"
            )
        )
    for run in ("a", "c"):
        assert not (tmp_path / run / "checkpoints").exists()


def test_a_ranker_that_cannot_rerank_is_refused_before_the_retriever_trains(tmp_path, demo_dir):  # noqa: F811
    overrides = [
        "rerank.retriever.experiment=s3rec_beauty_sasrec",
        f"rerank.retriever.overrides=['data.path={demo_dir}','data.source=null']",
    ]
    with pytest.raises(OptionError, match="candidate_bce"):
        train(rerank_run(tmp_path / "run", demo_dir, "model=sasrec", *overrides))
    assert not (tmp_path / "run" / "retriever").exists()


def test_a_tampered_rerank_record_is_refused(tmp_path, demo_dir, retriever_ckpt):  # noqa: F811
    metrics, _ = train(
        rerank_run(tmp_path / "run", demo_dir, f"rerank.retriever.ckpt_path={retriever_ckpt}")
    )
    contents = torch.load(metrics["checkpoint"], weights_only=True)
    for tamper in (
        lambda r: r.update(_target_="os.system"),
        lambda r: r["options"].update(candidates=-1),
        lambda r: r["retriever"]["scorer"].update(name="target_attention"),
        lambda r: r["retriever"].update(num_items=3),
    ):
        broken = copy.deepcopy(contents)
        tamper(broken["recsys_seq"]["rerank"])
        path = tmp_path / "broken.ckpt"
        torch.save(broken, path)
        with pytest.raises(CheckpointError):
            load(path)


@pytest.mark.slow
def test_two_processes_evaluate_a_pipeline_exactly_like_one(tmp_path, demo_dir, retriever_ckpt):  # noqa: F811
    metrics, _ = train(
        rerank_run(tmp_path / "run", demo_dir, f"rerank.retriever.ckpt_path={retriever_ckpt}")
    )
    checkpoint = metrics["checkpoint"]
    ddp = ["trainer=ddp_cpu", "trainer.devices=2", "trainer.strategy=ddp_spawn"]
    one, _ = evaluate(compose_config("eval", tmp_path / "one", [f"ckpt_path={checkpoint}"]))
    two, _ = evaluate(compose_config("eval", tmp_path / "two", [f"ckpt_path={checkpoint}", *ddp]))
    keys = [k for k in one if k.split("/")[0] in ("test", "retriever", "ranker")]
    assert {k.split("/")[0] for k in keys} == {"test", "retriever", "ranker"}
    for key in keys:
        assert two[key] == pytest.approx(one[key], abs=1e-6), key


def test_a_retriever_that_trained_on_the_rankers_events_is_refused(tmp_path, demo_dir):  # noqa: F811
    seen_all = short_checkpoint(tmp_path / "retriever", demo_dir)  # no data.train_holdout
    with pytest.raises(OptionError, match="trained on them"):
        train(
            rerank_run(
                tmp_path / "run",
                demo_dir,
                f"rerank.retriever.ckpt_path={seen_all}",
                "rerank.holdout=1",
            )
        )
    metrics, _ = train(  # on the retriever's own windows instead, knowingly
        rerank_run(tmp_path / "own", demo_dir, f"rerank.retriever.ckpt_path={seen_all}")
    )
    assert 0 <= metrics["test/ndcg@10"] <= 1


def test_the_results_table_puts_the_retriever_beside_the_pipeline(capsys):
    metrics = {
        "test/ndcg@10": 0.0515,
        "retriever/test/ndcg@10": 0.05,
        "popularity/test/ndcg@10": 0.005,
        "retriever/test/hr@100": 0.2,  # the candidate recall: the retriever's own row only
    }
    runs.print_results(metrics, model_name="din")
    table = capsys.readouterr().out
    header = next(line for line in table.splitlines() if "metric" in line)
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "metric",
        "din",
        "retriever",
        "vs retriever",
        "popularity",
        "ratio",
    ]
    row = next(line for line in table.splitlines() if "ndcg@10" in line)
    assert "1.030x" in row and "10.3x" in row
    assert "hr@100" not in table
