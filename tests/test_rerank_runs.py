"""Two-stage recommendation (rerank=topk) end to end: metrics beside the retriever's,
checkpoints, evaluation, serving and export, the one-command experiment, the retrievers and
records it refuses, and the results table. (The model in memory: tests/test_rerank_model.py.)"""

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
from recsys_seq.models import TwoStageTask
from recsys_seq.workflows import runs
from recsys_seq.workflows.evaluate import evaluate
from recsys_seq.workflows.export import export
from recsys_seq.workflows.export_programs import TwoStageRanker, example_inputs
from recsys_seq.workflows.recommend import recommend
from recsys_seq.workflows.train import train
from tests.helpers import SHORT, compose_config, rerank_run, short_checkpoint, train_config

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick


def _user_indices(prepared: Path) -> dict:
    users = pl.read_parquet(prepared / schema.USERS_FILE)
    return dict(zip(users[schema.ORIGINAL_ID].to_list(), users[schema.USER].to_list(), strict=True))


# -- end to end --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def retriever_ckpt(tmp_path_factory, demo_dir):
    return short_checkpoint(
        tmp_path_factory.mktemp("retriever"),
        demo_dir,
        "model.exclude_history=true",
        "data.train_holdout=1",  # fits rankers with rerank.holdout=1 too
    )


# DIN trained on the candidates, and a second model of every item blended with the retriever
RANKERS = {"din": [], "sasrec": ["rerank.blend=0.5"]}


@pytest.mark.parametrize("ranker", sorted(RANKERS))
def test_a_two_stage_run_logs_pipeline_retriever_and_ranker_and_serves(
    tmp_path,
    demo_dir,
    retriever_ckpt,
    ranker,
):
    run_dir = tmp_path / "run"
    metrics, objects = train(
        rerank_run(
            run_dir,
            demo_dir,
            f"rerank.retriever.ckpt_path={retriever_ckpt}",
            "model.exclude_history=true",
            *RANKERS[ranker],
            ranker=ranker,
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


def test_the_training_log_shows_how_far_the_ranker_moved_from_the_retriever(
    tmp_path, demo_dir, retriever_ckpt
):
    """``a * ranker + b * retriever score`` starts at (0, 1), the retriever's order; the CSV
    log has both weights as the epoch left them, the values its checkpoint holds."""
    run_dir = tmp_path / "run"
    overrides = [o for o in SHORT if not o.startswith("logger=")]
    metrics, _ = train(
        train_config(
            run_dir,
            demo_dir,
            "model=din",
            "rerank=topk",
            "rerank.candidates=20",
            f"rerank.retriever.ckpt_path={retriever_ckpt}",
            "model.exclude_history=true",
            "logger=csv",
            *overrides,
        )
    )
    task = load(Path(metrics["checkpoint"]))
    logged = pl.read_csv(next((run_dir / "csv").rglob("metrics.csv")))
    for name in ("ranker_weight", "score_weight"):
        values = logged[f"train/{name}"].drop_nulls()
        weight = getattr(task, name).item()
        assert values.len() == 1 and values[0] == pytest.approx(weight, abs=1e-6), name
    assert task.ranker_weight.item() != 0.0  # trained: it has left its start


def test_one_command_trains_the_retriever_then_reuses_it(tmp_path, demo_dir):
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
def test_wrong_retrievers_are_refused_before_training(tmp_path, demo_dir, overrides, error):
    with pytest.raises((OptionError, CheckpointError), match=error):
        train(rerank_run(tmp_path / "run", demo_dir, *overrides))
    assert not (tmp_path / "run" / ".recsys-seq.json").exists()  # not even claimed


def test_a_retriever_of_other_items_or_two_stages_is_refused(tmp_path, demo_dir, retriever_ckpt):
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


def test_a_ranker_that_cannot_rerank_is_refused_before_the_retriever_trains(tmp_path, demo_dir):
    overrides = [
        "rerank.retriever.experiment=s3rec_beauty_sasrec",
        f"rerank.retriever.overrides=['data.path={demo_dir}','data.source=null']",
    ]
    with pytest.raises(OptionError, match="candidate_bce"):
        train(rerank_run(tmp_path / "run", demo_dir, "model=sasrec", *overrides))
    assert not (tmp_path / "run" / "retriever").exists()


def test_a_tampered_rerank_record_is_refused(tmp_path, demo_dir, retriever_ckpt):
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
def test_two_processes_evaluate_a_pipeline_exactly_like_one(tmp_path, demo_dir, retriever_ckpt):
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


def test_a_retriever_that_trained_on_the_rankers_events_is_refused(tmp_path, demo_dir):
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
