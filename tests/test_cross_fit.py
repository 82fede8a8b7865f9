"""Cross-fitted two-stage training (rerank.cross_fit=K): the fold retrievers' data leaves out
exactly one fold of users, each training window is scored by the retriever that never saw its
user, evaluation reads the serving retriever only, and every checkpoint is checked for the
users it left out."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from recsys_seq.checkpoint import CheckpointError, load, open_checkpoint
from recsys_seq.core.options import OptionError
from recsys_seq.data import PaddedBatchCollator, Stage, WindowDataset
from recsys_seq.data.options import data_options
from recsys_seq.models import build_model
from recsys_seq.models.candidate_bce import cut_visibility
from recsys_seq.models.reranker import Reranker
from recsys_seq.workflows.evaluate import evaluate
from recsys_seq.workflows.retriever import rerank_options
from recsys_seq.workflows.train import train
from tests.helpers import compose_config, random_histories, rerank_run, sequences, short_checkpoint
from tests.test_rerank_model import NUM_ITEMS, specs

# -- the fold retrievers' data -----------------------------------------------------------


@pytest.mark.parametrize("folds", [2, 3])
@pytest.mark.parametrize("windows", ["all", "last", "prefixes"])
def test_a_fold_retriever_trains_on_every_window_but_its_folds_users(folds, windows):
    data = sequences(random_histories(50, NUM_ITEMS, 30, seed=folds), num_items=NUM_ITEMS)
    everyone = WindowDataset(data, Stage.TRAIN, 8, train_windows=windows)
    seen = set()
    for fold in range(folds):
        part = WindowDataset(
            data, Stage.TRAIN, 8, train_windows=windows, cross_fit_fold=(fold, folds)
        )
        kept = everyone.users % folds != fold
        assert kept.any() and not kept.all()
        for name in ("users", "starts", "lengths"):
            assert np.array_equal(getattr(part, name), getattr(everyone, name)[kept])
        seen |= set(np.unique(everyone.users[~kept]).tolist())
    assert seen == set(np.unique(everyone.users).tolist())  # the folds cover every user once


@pytest.mark.parametrize("stage", [Stage.VAL, Stage.TEST, Stage.SERVE])
def test_evaluation_and_serving_windows_keep_every_user(stage):
    data = sequences(random_histories(30, NUM_ITEMS, 20, seed=1), num_items=NUM_ITEMS)
    everyone = WindowDataset(data, stage, 8)
    fold = WindowDataset(data, stage, 8, cross_fit_fold=(0, 2))
    assert np.array_equal(fold.users, everyone.users)
    assert np.array_equal(fold.starts, everyone.starts)


@pytest.mark.parametrize("fold", [[0, 1], [2, 2], [3, 2], [0], [0, 1, 2]])
def test_a_fold_that_is_not_k_of_k_is_refused(fold):
    with pytest.raises(OptionError, match=r"data.cross_fit_fold"):
        data_options({"source": "demo", "cross_fit_fold": fold})
    data = sequences(random_histories(5, NUM_ITEMS, 6), num_items=NUM_ITEMS)
    if len(fold) == 2:
        with pytest.raises(ValueError, match="cross_fit_fold"):
            WindowDataset(data, Stage.TRAIN, 8, cross_fit_fold=tuple(fold))


# -- the model ---------------------------------------------------------------------------


def cross_fitted(seed: int = 0, folds: int = 2, **options):
    torch.manual_seed(seed)
    ranker, rerank = specs(cross_fit=folds, hard_negatives=1.0, **options)
    task = build_model(ranker, rerank=rerank)
    with torch.no_grad():
        task.ranker_weight.fill_(1.0)
    return task


def training_batch(seed: int = 0):
    data = sequences(random_histories(60, NUM_ITEMS, 12, seed=seed), num_items=NUM_ITEMS)
    dataset = WindowDataset(data, Stage.TRAIN, 12)
    return PaddedBatchCollator()(dataset.__getitems__(list(range(len(dataset)))))


@pytest.mark.filterwarnings(r"ignore:You are trying to `self.log\(\)`")
@pytest.mark.parametrize("folds", [2, 3])
def test_each_training_window_is_scored_by_the_retriever_blind_to_its_user(monkeypatch, folds):
    task = cross_fitted(folds=folds).train()
    batch = training_batch()
    seen = {}
    cuts, mine, with_score = task.loss.cuts, task.mined_negatives, Reranker.with_retriever_score

    def record(name, function):
        def recorded(*args):
            seen[name] = (args, function(*args))
            return seen[name][1]

        return recorded

    monkeypatch.setattr(task.loss, "cuts", record("cuts", cuts))
    monkeypatch.setattr(task, "mined_negatives", record("negatives", mine))
    monkeypatch.setattr(Reranker, "with_retriever_score", record("score", with_score))
    task.training_step(batch, 0)

    (_,), (cut, positive) = seen["cuts"]
    (_, pool, valid), negatives = seen["negatives"]
    (_, _, score), _ = seen["score"]
    fold = batch["user"] % folds
    assert len(set(fold.tolist())) == folds  # the batch mixes every fold
    candidates = torch.cat([positive[..., None], negatives], -1)
    visible = cut_visibility(cut, candidates.shape[-1], batch["items"].shape[1])
    with torch.no_grad():
        for k, retriever in enumerate([*task.fold_retrievers, task.retriever]):
            states = retriever.encode(batch)
            top, top_valid = task.retriever_top(batch, retriever, states, cut, positive)
            scored = retriever.score(states, visible, candidates.flatten(1))
            own = fold == k  # the serving retriever (k == folds) scores no one's window
            assert torch.equal(pool[own], top[own]) and torch.equal(valid[own], top_valid[own])
            torch.testing.assert_close(score[own], scored[own])
            assert not torch.equal(pool[~own], top[~own])  # the others' views differ
    assert (negatives[..., :, None] == pool[..., None, :]).any(-1).all()  # all mined


def test_evaluation_reads_the_serving_retriever_only():
    task = cross_fitted(seed=1).eval()
    plain_ranker, plain_rerank = specs(hard_negatives=1.0)
    plain = build_model(plain_ranker, rerank=plain_rerank).eval()
    weights = {k: v for k, v in task.state_dict().items() if not k.startswith("fold_retrievers")}
    plain.load_state_dict(weights)
    data = sequences(random_histories(60, NUM_ITEMS, 12), num_items=NUM_ITEMS)
    dataset = WindowDataset(data, Stage.TEST, 12)
    batch = PaddedBatchCollator()(dataset.__getitems__(list(range(len(dataset)))))
    with torch.no_grad():
        got, expected = (
            task.candidates(batch, batch["items"]),
            plain.candidates(batch, batch["items"]),
        )
        for fold in task.fold_retrievers:  # other weights: a fold retriever would show
            fold.embedder.items.weight.mul_(-1)
        again = task.candidates(batch, batch["items"])
    assert torch.equal(got.items, expected.items)
    torch.testing.assert_close(got.ranker_scores, expected.ranker_scores)
    assert torch.equal(again.items, got.items)


@pytest.mark.filterwarnings(r"ignore:You are trying to `self.log\(\)`")
def test_training_leaves_the_fold_retrievers_as_they_were():
    task = cross_fitted(seed=2).train()
    assert not any(fold.training for fold in task.fold_retrievers)
    frozen = {k: v.clone() for k, v in task.fold_retrievers.state_dict().items()}
    optimizer = torch.optim.Adam([p for p in task.parameters() if p.requires_grad], lr=0.01)
    for _ in range(3):
        optimizer.zero_grad()
        task.training_step(training_batch(), 0).backward()
        optimizer.step()
    assert all(torch.equal(v, task.fold_retrievers.state_dict()[k]) for k, v in frozen.items())


def test_the_options_refuse_what_cannot_cross_fit():
    retriever = {"ckpt_path": "r.ckpt"}
    for values, error in [
        ({"retriever": {"experiment": "demo_sasrec"}, "cross_fit": 1}, "K >= 2"),
        ({"retriever": {"experiment": "demo_sasrec"}, "cross_fit": 2, "holdout": 1}, "choose one"),
        ({"retriever": retriever, "cross_fit": 2}, "needs 2 rerank.retriever.fold_ckpt_paths"),
        ({"retriever": {**retriever, "fold_ckpt_paths": ["a.ckpt"]}, "cross_fit": 2}, "got 1"),
        ({"retriever": {**retriever, "fold_ckpt_paths": ["a.ckpt"]}}, "with rerank.cross_fit"),
        (
            {"retriever": {"experiment": "demo_sasrec", "fold_ckpt_paths": ["a"]}, "cross_fit": 2},
            "go with rerank.retriever.ckpt_path",
        ),
    ]:
        with pytest.raises(OptionError, match=error):
            rerank_options(values)


# -- runs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, error",
    [
        (["rerank.cross_fit=1"], "K >= 2"),
        (["rerank.cross_fit=2", "rerank.holdout=1"], "choose one"),
        (["rerank.candidates=100000"], "more than the"),
        (["model=sasrec"], "candidate_bce"),
        (["data.cross_fit_fold=[0,2]"], "a ranker trains on every user"),
        (["rerank.cross_fit=2", "rerank.init_from_retriever=true"], "init_from_retriever"),
    ],
)
def test_a_refused_two_stage_run_prints_and_writes_nothing(
    tmp_path, demo_dir, capfd, caplog, overrides, error
):
    """Option errors come before Lightning's first line and before the run folder exists."""
    run_dir = tmp_path / "run"
    cfg = rerank_run(run_dir, demo_dir, "rerank.retriever.experiment=demo_sasrec", *overrides)
    with pytest.raises(OptionError, match=error):
        train(cfg)
    printed = "".join(capfd.readouterr()) + caplog.text  # Lightning's lines are log records
    assert "GPU available" not in printed and "Seed set" not in printed
    assert not run_dir.exists() or not any(run_dir.iterdir())


def one_command(demo_dir: Path) -> list[str]:
    """A two-fold cross-fitted run whose retrievers (demo_sasrec) train for three batches."""
    short = f"'data.path={demo_dir}','data.source=null','trainer.max_epochs=1'"
    return [
        "rerank.retriever.experiment=demo_sasrec",
        f"rerank.retriever.overrides=[{short},'trainer.limit_train_batches=3']",
        "rerank.cross_fit=2",
        "baselines=false",
        "callbacks=weight_average",  # its checkpoints hold the raw weights too
    ]


def fold_weights(checkpoint: Path) -> list[str]:
    """Names of fold retriever weights in ``checkpoint``'s averaged or raw weights."""
    stored = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert "current_model_state" in stored and any(
        k.startswith("retriever.") for k in stored["state_dict"]
    )
    return [
        name
        for key in ("state_dict", "current_model_state")
        for name in stored.get(key, {})
        if "fold_retrievers" in name
    ]


@pytest.mark.slow
def test_one_command_trains_a_retriever_per_fold_and_its_checkpoint_evaluates_alike(
    tmp_path, demo_dir
):
    run_dir = tmp_path / "run"
    overrides = one_command(demo_dir)
    metrics, _ = train(rerank_run(run_dir, demo_dir, *overrides))
    records = {}
    for folder, fold in [
        ("retriever", None),
        ("retriever_fold0", [0, 2]),
        ("retriever_fold1", [1, 2]),
    ]:
        records[folder] = json.loads((run_dir / folder / "metrics.json").read_text())
        assert open_checkpoint(records[folder]["checkpoint"]).data.cross_fit_fold == fold
    ranker = open_checkpoint(metrics["checkpoint"])
    assert ranker.rerank.options.cross_fit == 2
    for saved in (run_dir / "checkpoints").glob("*.ckpt"):  # each fold has its own checkpoint
        assert fold_weights(saved) == [], saved
    served = load(metrics["checkpoint"])  # what serving and export build: no fold retriever
    assert len(served.fold_retrievers) == 0 and not served.training
    assert ranker.data.cross_fit_fold is None  # the ranker trains on every user
    as_tested = [f"ckpt_path={metrics['checkpoint']}", "trainer.limit_test_batches=2"]
    again, _ = evaluate(compose_config("eval", tmp_path / "eval", as_tested))
    for key in ("test/ndcg@10", "retriever/test/ndcg@10", "ranker/test/auc"):
        assert again[key] == pytest.approx(metrics[key], abs=1e-6), key
    resumed, _ = train(rerank_run(run_dir, demo_dir, *overrides))  # reuses every retriever
    for folder, record in records.items():
        assert json.loads((run_dir / folder / "metrics.json").read_text()) == record
    assert resumed["test/ndcg@10"] == pytest.approx(metrics["test/ndcg@10"], abs=1e-6)
    for other, changed in [
        ("rerank.cross_fit=3", "rerank.cross_fit: 2 vs 3"),
        ("rerank.cross_fit=0", "2 vs 0"),
    ]:
        with pytest.raises(CheckpointError, match=changed):  # before any retriever trains
            train(rerank_run(run_dir, demo_dir, *overrides, other))
    assert not (run_dir / "retriever_fold2").exists()


@pytest.fixture(scope="module")
def fold_checkpoints(tmp_path_factory, demo_dir) -> dict[str, Path]:
    """Short retrievers: one on every user, one per fold of two, one of fold 0 of three."""
    root = tmp_path_factory.mktemp("folds")
    return {
        name: short_checkpoint(
            root / name, demo_dir, *([f"data.cross_fit_fold=[{fold}]"] if fold else [])
        )
        for name, fold in [("all", None), ("0", "0,2"), ("1", "1,2"), ("0of3", "0,3")]
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("serving", "folds", "error"),
    [
        ("0", ["0", "1"], "never trained on the users of fold 0"),  # a fold retriever serves
        ("all", ["1", "0"], r"fold retriever 0 .* data.cross_fit_fold=\[1, 2\]"),  # swapped
        ("all", ["all", "1"], "data.cross_fit_fold=None"),  # it saw fold 0's users
        ("all", ["0of3", "1"], r"data.cross_fit_fold=\[0, 3\]"),  # another split
        ("0", [], "never trained on the users"),  # no cross-fitting: still refused
    ],
)
def test_retrievers_that_saw_the_wrong_users_are_refused(
    tmp_path, demo_dir, fold_checkpoints, serving, folds, error
):
    paths = ",".join(str(fold_checkpoints[f]) for f in folds)
    overrides = [
        f"rerank.retriever.ckpt_path={fold_checkpoints[serving]}",
        f"rerank.retriever.fold_ckpt_paths=[{paths}]",
        f"rerank.cross_fit={len(folds)}",
    ]
    with pytest.raises(OptionError, match=error):
        train(rerank_run(tmp_path / "run", demo_dir, *overrides))
    assert not (tmp_path / "run").exists()  # refused before the run folder is claimed


@pytest.mark.slow
def test_a_fold_retriever_of_other_prepared_data_is_refused(tmp_path, demo_dir, fold_checkpoints):
    """Same items, other users' indices: fold k of that folder is not fold k of this one."""
    copy = tmp_path / "copy"
    shutil.copytree(demo_dir, copy)
    elsewhere = short_checkpoint(tmp_path / "elsewhere", copy, "data.cross_fit_fold=[0,2]")
    overrides = [
        f"rerank.retriever.ckpt_path={fold_checkpoints['all']}",
        f"rerank.retriever.fold_ckpt_paths=[{elsewhere},{fold_checkpoints['1']}]",
        "rerank.cross_fit=2",
    ]
    with pytest.raises(OptionError, match=f"trained on {copy}"):
        train(rerank_run(tmp_path / "run", demo_dir, *overrides))
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_fold_checkpoints_given_by_path_train_the_ranker(tmp_path, demo_dir, fold_checkpoints):
    paths = ",".join(str(fold_checkpoints[f]) for f in ("0", "1"))
    metrics, objects = train(
        rerank_run(
            tmp_path / "run",
            demo_dir,
            f"rerank.retriever.ckpt_path={fold_checkpoints['all']}",
            f"rerank.retriever.fold_ckpt_paths=[{paths}]",
            "rerank.cross_fit=2",
        )
    )
    task = objects["model"]
    for k, fold in enumerate(task.fold_retrievers):
        stored = open_checkpoint(fold_checkpoints[str(k)]).weights
        assert torch.equal(fold.embedder.items.weight, stored["model.embedder.items.weight"])
    assert 0 <= metrics["test/ndcg@10"] <= 1
