"""Every path of a two-stage model (rerank=topk), for retrievers of each encoder with and
without item side features: train, eval, recsys-recommend, the Python API and export in each
format; and retriever experiments that are unknown or come from the user's hydra.searchpath."""

import datetime
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

import recsys_seq
from data_prep import schema
from recsys_seq.checkpoint import load, open_checkpoint
from recsys_seq.core.errors import UserError
from recsys_seq.core.options import OptionError
from recsys_seq.workflows.evaluate import evaluate
from recsys_seq.workflows.export import export
from recsys_seq.workflows.export_programs import TwoStageRanker, example_inputs
from recsys_seq.workflows.recommend import recommend
from recsys_seq.workflows.train import train
from tests.helpers import compose_config, histories, rerank_run, short_checkpoint

pytestmark = pytest.mark.slow  # end-to-end runs and real commands: not in make test-quick

TINY = ["trainer.limit_train_batches=2", "data.batch_size=32", "data.eval_batch_size=256"]
# (retriever's model, retriever's side features, ranker's side features): each encoder with
# and without item features, the stages reading different ones
COMBINATIONS = [
    ("sasrec", "[]", "[]"),
    ("sasrec", "[category]", "[]"),
    ("gru", "[]", "[category]"),
    ("gru", "[category]", "[category]"),
]
USERS = 30  # the dataset's first users, served by both recsys-recommend and the API
K = 10


@pytest.fixture(scope="module", params=COMBINATIONS, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def pipeline(request, tmp_path_factory, demo_dir):
    """``(checkpoint, train metrics)`` of a tiny two-stage run over a tiny retriever."""
    encoder, retriever_features, ranker_features = request.param
    root = tmp_path_factory.mktemp(f"{encoder}{len(retriever_features)}{len(ranker_features)}")
    retriever = short_checkpoint(
        root / "retriever",
        demo_dir,
        f"model={encoder}",
        f"model.side_features={retriever_features}",
        "model.exclude_history=true",
        *TINY,
    )
    cfg = rerank_run(
        root / "run",
        demo_dir,
        f"rerank.retriever.ckpt_path={retriever}",
        f"model.side_features={ranker_features}",
        "model.exclude_history=true",
        "baselines=false",
        *TINY,
    )
    metrics, _ = train(cfg)
    return Path(metrics["checkpoint"]), metrics


def served(tmp_path: Path, checkpoint: Path, *overrides: str) -> pl.DataFrame:
    output = tmp_path / f"recs{len(list(tmp_path.glob('recs*')))}.parquet"
    cfg = compose_config(
        "recommend", tmp_path / "rec", [f"ckpt_path={checkpoint}", f"output={output}", *overrides]
    )
    frame, _ = recommend(cfg, show_progress=False)
    assert pl.read_parquet(output).equals(frame)
    return frame


def test_eval_reproduces_the_runs_test_metrics(tmp_path, pipeline):
    checkpoint, metrics = pipeline
    cfg = compose_config(
        "eval",
        tmp_path,
        [f"ckpt_path={checkpoint}", "trainer.limit_test_batches=2", "baselines=false"],
    )
    again, _ = evaluate(cfg)
    for key in ("test/ndcg@10", "retriever/test/ndcg@10", "ranker/test/auc"):
        assert again[key] == pytest.approx(metrics[key], abs=1e-6), key


def test_the_api_serves_what_recsys_recommend_serves(tmp_path, pipeline, demo_dir):
    checkpoint, _ = pipeline
    frame = served(tmp_path, checkpoint, f"k={K}")
    users = pl.read_parquet(demo_dir / schema.USERS_FILE).sort(schema.USER).head(USERS)
    wanted = frame.join(
        users.select(pl.col(schema.ORIGINAL_ID).alias("user_id"), schema.USER), on="user_id"
    ).sort(schema.USER, "rank")
    model = recsys_seq.load(checkpoint)
    got = model.recommend_batch(histories(demo_dir, USERS), k=K)
    assert got["query"].to_list() == wanted[schema.USER].to_list()
    assert got["item_id"].to_list() == wanted["item_id"].to_list()
    np.testing.assert_allclose(got["score"], wanted["score"], rtol=1e-5, atol=1e-5)
    one = model.recommend(histories(demo_dir, 1)[0], k=K)
    assert one.items == got.filter(pl.col("query") == 0)["item_id"].to_list()
    empty = model.recommend_batch([], k=K)
    assert empty.is_empty() and empty.schema == got.schema


def test_a_users_file_and_users_that_are_all_unknown(tmp_path, pipeline, demo_dir):
    checkpoint, _ = pipeline
    known = pl.read_parquet(demo_dir / schema.USERS_FILE)[schema.ORIGINAL_ID].head(3).to_list()
    listed = tmp_path / "users.txt"
    listed.write_text("\n".join(map(str, [known[2], "ghost", known[0]])) + "\n")
    frame = served(tmp_path, checkpoint, f"users={listed}", "k=4")
    assert frame["user_id"].unique(maintain_order=True).to_list() == [known[2], known[0]]
    ghosts = tmp_path / "ghosts.txt"
    ghosts.write_text("ghost\nnobody\n")
    skipped = served(tmp_path, checkpoint, f"users={ghosts}", "unknown=skip")
    assert skipped.is_empty()
    assert skipped.columns == ["user_id", "rank", "item_id", "score", "source"]
    popular = served(tmp_path, checkpoint, f"users={ghosts}", "unknown=popular", "k=3")
    top = recsys_seq.load(checkpoint).catalogue.most_popular(3)
    assert popular["user_id"].to_list() == ["ghost"] * 3 + ["nobody"] * 3
    ids = recsys_seq.load(checkpoint).catalogue.ids(top).to_list()
    assert popular["item_id"].to_list() == ids * 2


@pytest.mark.parametrize("suffix", [".pt2", ".pt", ".onnx"])
def test_every_export_format_serves_the_models_ranking_or_is_refused(tmp_path, pipeline, suffix):
    checkpoint, _ = pipeline
    output = tmp_path / f"model{suffix}"
    cfg = compose_config(
        "export", tmp_path / "export", [f"ckpt_path={checkpoint}", f"output={output}"]
    )
    task = load(checkpoint)
    gru = task.rerank.retriever.encoder.name == "gru"
    if suffix == ".onnx" or (suffix == ".pt2" and gru):
        with pytest.raises(OptionError, match=r"\.pt"):
            export(cfg)
        assert not output.exists()
        return
    export(cfg)
    program = torch.export.load(output).module() if suffix == ".pt2" else torch.jit.load(output)
    eager = TwoStageRanker(task)
    for seed, (size, length) in enumerate([(1, 3), (6, 9)]):
        inputs = example_inputs(eager, size, length, seed=seed)
        with torch.no_grad():
            expected_items, expected_scores = eager(*inputs)
            items, scores = program(*inputs)
        assert torch.equal(items, expected_items)
        torch.testing.assert_close(scores, expected_scores)


# -- the API's id policy -----------------------------------------------------------------


@pytest.fixture(scope="module")
def api(pipeline):
    return recsys_seq.load(pipeline[0])


@pytest.mark.parametrize(
    "history, shown",
    [
        ([True], r"histories\[0\]\[0\] = True \(bool\)"),
        ([7, True], r"histories\[0\]\[1\] = True \(bool\)"),
        ([datetime.date(2020, 1, 2)], "date"),
        ([1.5], "1.5 .*not an integer id"),
        ([float("nan")], "nan .*missing"),
        ([None], "None .*missing"),
        ([[1, 2]], r"\[1, 2\] \(list\)"),
        ([np.bool_(True)], "True"),
        ([" "], "missing"),
    ],
)
def test_hostile_ids_are_refused_naming_the_value_and_its_place(api, history, shown):
    with pytest.raises(UserError, match=shown):
        api.recommend(history)
    with pytest.raises(ValueError, match=shown.replace(r"histories\[0\]", r"histories\[1\]")):
        api.recommend_batch([[1], history])


def test_ids_are_read_value_by_value(api, demo_dir):
    history = histories(demo_dir, 1)[0]
    spelled = [
        f" 0{i}" if n % 3 == 0 else float(i) if n % 3 == 1 else np.int64(i)
        for n, i in enumerate(history)
    ]
    assert api.recommend(spelled).items == api.recommend(history).items


# -- retriever experiments ---------------------------------------------------------------


def test_an_unknown_retriever_experiment_is_one_paragraph_and_leaves_nothing(tmp_path, demo_dir):
    with pytest.raises(OptionError, match="no experiment config of that name.*s3rec_beauty_sasrec"):
        train(rerank_run(tmp_path / "run", demo_dir, "rerank.retriever.experiment=nope"))
    with pytest.raises(OptionError, match="do not compose"):
        train(
            rerank_run(
                tmp_path / "run",
                demo_dir,
                "rerank.retriever.experiment=s3rec_beauty_sasrec",
                "rerank.retriever.overrides=['trainer.nope=1']",
            )
        )
    run_dir = tmp_path / "cli"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "recsys-train"),
            "model=din",
            "rerank=topk",
            "rerank.retriever.experiment=nope",
            f"data.path={demo_dir}",
            f"hydra.run.dir={run_dir}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert errors == [line for line in errors if line.startswith("recsys-train: error: ")]
    assert len(errors) == 1 and "rerank.retriever.experiment=nope" in errors[0]
    assert "Traceback" not in done.stderr and not run_dir.exists()


def test_a_retriever_experiment_from_the_users_searchpath(tmp_path, demo_dir):
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "my_retriever.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /model: gru\nmodel:\n  embedding_dim: 16\n"
    )
    run_dir = tmp_path / "run"
    metrics, _ = train(
        rerank_run(
            run_dir,
            demo_dir,
            f"hydra.searchpath=[file://{conf.parent}]",
            "rerank.retriever.experiment=my_retriever",
            f"rerank.retriever.overrides=['data.path={demo_dir}','trainer.max_epochs=1']",
            "baselines=false",
            *TINY,
        )
    )
    trained = open_checkpoint(run_dir / "retriever" / "checkpoints" / "best.ckpt")
    assert trained.spec.encoder.name == "gru" and trained.spec.embedding_dim == 16
    assert 0 <= metrics["retriever/test/ndcg@10"] <= 1
