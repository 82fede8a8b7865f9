"""Choosing a blend's share without retraining: a blended pipeline's ranker trains on its own
loss whatever the share, so ``recsys-eval stage=val blend=w`` re-weighs one trained pipeline
on the validation events, and ``recsys-recommend blend=w``, ``recsys_seq.load(path, blend=w)``
and ``recsys-export blend=w`` serve the share chosen."""

from pathlib import Path

import polars as pl
import pytest
import torch
from polars.testing import assert_frame_equal

import recsys_seq
from recsys_seq.checkpoint import CheckpointError, open_checkpoint
from recsys_seq.core.options import OptionError
from recsys_seq.models.two_stage import BLEND_SHARES
from recsys_seq.workflows.evaluate import evaluate
from recsys_seq.workflows.export import export, summary
from recsys_seq.workflows.recommend import recommend
from recsys_seq.workflows.train import train
from tests.helpers import compose_config, histories, rerank_run, run_cli, short_checkpoint

pytestmark = pytest.mark.slow  # trains a retriever and two pipelines

TRAINED_SHARE = 0.5
METRICS = ("ndcg@10", "hr@10", "hr@5", "mrr@10")


@pytest.fixture(scope="module")
def retriever_ckpt(tmp_path_factory, demo_dir) -> Path:
    return short_checkpoint(
        tmp_path_factory.mktemp("retriever"), demo_dir, "model.exclude_history=true"
    )


def pipeline(tmp_path_factory, demo_dir, retriever_ckpt, ranker: str, *overrides) -> dict:
    run_dir = tmp_path_factory.mktemp(f"pipeline_{ranker}") / "run"
    metrics, _ = train(
        rerank_run(
            run_dir,
            demo_dir,
            f"rerank.retriever.ckpt_path={retriever_ckpt}",
            "model.exclude_history=true",
            "baselines=false",
            *overrides,
            ranker=ranker,
        )
    )
    return metrics


@pytest.fixture(scope="module")
def blended(tmp_path_factory, demo_dir, retriever_ckpt) -> dict:
    """The run's metrics; ``checkpoint`` is the blended pipeline's best.ckpt."""
    share = f"rerank.blend={TRAINED_SHARE}"
    return pipeline(tmp_path_factory, demo_dir, retriever_ckpt, "sasrec", share)


def evaluate_at(tmp_path, checkpoint, *overrides) -> dict:
    folder = tmp_path / "_".join(o.replace("=", "-") for o in overrides)
    cfg = compose_config("eval", folder, [f"ckpt_path={checkpoint}", "baselines=false", *overrides])
    metrics, _ = evaluate(cfg)
    return metrics


def test_validation_repeats_the_runs_own(tmp_path, blended):
    """stage=val ranks the validation events as the run validated its best epoch."""
    again = evaluate_at(tmp_path, blended["checkpoint"], "stage=val", "trainer.limit_val_batches=2")
    assert not [key for key in again if key.startswith("test/")]
    for name in METRICS:
        assert again[f"val/{name}"] == pytest.approx(blended[f"val/{name}"], abs=1e-6), name


def test_the_trained_share_is_the_default(tmp_path, blended):
    plain = evaluate_at(tmp_path, blended["checkpoint"])
    shared = evaluate_at(tmp_path, blended["checkpoint"], f"blend={TRAINED_SHARE}")
    for name in METRICS:
        assert shared[f"test/{name}"] == pytest.approx(plain[f"test/{name}"], abs=1e-9), name


@pytest.mark.parametrize("stage", ["val", "test"])
def test_share_zero_ranks_as_the_retriever_alone(tmp_path, blended, stage):
    metrics = evaluate_at(tmp_path, blended["checkpoint"], f"stage={stage}", "blend=0")
    for name in METRICS:
        ours, retriever = metrics[f"{stage}/{name}"], metrics[f"retriever/{stage}/{name}"]
        assert ours == pytest.approx(retriever, abs=1e-7), name


@pytest.mark.parametrize("share", [0.0, 0.25, 1.0])
def test_a_share_replaces_the_trained_one_and_nothing_else(blended, share):
    trained = open_checkpoint(blended["checkpoint"])
    model = trained.build(blend=share)
    assert model.rerank.options.blend == share
    assert model.ranker_weight.item() == share
    assert model.score_weight.item() == pytest.approx(1.0 - share)
    state = model.state_dict()
    for name, weight in trained.weights.items():
        if name not in BLEND_SHARES:
            assert torch.equal(state[name], weight), name
    again = trained.build()  # the checkpoint itself is untouched
    assert again.ranker_weight.item() == TRAINED_SHARE


@pytest.mark.parametrize("share", [-0.5, 1.01, float("nan")])
def test_a_share_outside_zero_to_one_is_not_built(blended, share):
    with pytest.raises(ValueError, match="share in"):
        open_checkpoint(blended["checkpoint"]).build(blend=share)


def test_served_at_share_zero_are_the_retrievers_own_recommendations(
    tmp_path, blended, retriever_ckpt
):
    frames = {}
    for name, checkpoint, extra in (
        ("pipeline", blended["checkpoint"], ["blend=0"]),
        ("retriever", retriever_ckpt, []),
    ):
        output = tmp_path / f"{name}.parquet"
        overrides = [f"ckpt_path={checkpoint}", "stage=test", "k=5", f"output={output}", *extra]
        frames[name], _ = recommend(
            compose_config("recommend", tmp_path / name, overrides), show_progress=False
        )
        assert pl.read_parquet(output).equals(frames[name])
    assert frames["pipeline"].height > 0
    assert frames["pipeline"].equals(frames["retriever"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["blend=1.5"], "blend"),
        (["blend=-0.1"], "blend"),
        (["blend=abc"], "blend"),
        (["blend=nan"], "blend"),
        (["blend=inf"], "blend"),
        (["stage=train"], "stage"),
        (["stage=serve"], "stage"),
    ],
)
def test_wrong_values_are_refused_before_any_work(tmp_path, blended, overrides, message):
    with pytest.raises(OptionError, match=message):
        evaluate_at(tmp_path, blended["checkpoint"], *overrides)


def test_a_share_for_a_model_that_is_not_a_blend_is_refused(
    tmp_path, tmp_path_factory, demo_dir, retriever_ckpt
):
    din = pipeline(tmp_path_factory, demo_dir, retriever_ckpt, "din")["checkpoint"]
    for checkpoint, kind in ((retriever_ckpt, "a single model"), (din, "trained on candidates")):
        with pytest.raises(CheckpointError, match=kind) as refused:
            evaluate_at(tmp_path, checkpoint, "blend=0.5")
        assert str(checkpoint) in str(refused.value)
        output = tmp_path / "recs.parquet"
        with pytest.raises(CheckpointError, match=kind):
            recommend(
                compose_config(
                    "recommend",
                    tmp_path / "rec",
                    [f"ckpt_path={checkpoint}", "blend=0.5", f"output={output}"],
                ),
                show_progress=False,
            )
        assert not output.exists()


def test_the_command_chooses_a_share_on_validation_and_says_a_wrong_one_in_a_line(
    tmp_path, blended, retriever_ckpt
):
    run = tmp_path / "chosen"
    done = run_cli(
        "recsys-eval",
        [f"ckpt_path={blended['checkpoint']}", "stage=val", "blend=0.3", f"hydra.run.dir={run}"],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "val: next item ranked against all items" in done.stdout
    assert (run / "metrics.json").exists()

    refused = run_cli("recsys-eval", [f"ckpt_path={retriever_ckpt}", "blend=0.3"], tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.startswith("recsys-eval: error: blend=0.3")
    assert "Traceback" not in refused.stderr


def export_at(folder: Path, checkpoint: Path, *overrides: str) -> Path:
    output = folder / "model.pt2"
    cfg = compose_config(
        "export", folder / "run", [f"ckpt_path={checkpoint}", f"output={output}", *overrides]
    )
    export(cfg)
    return output


def top_items(model: recsys_seq.Recommender, requests: list[list]) -> pl.DataFrame:
    return model.recommend_batch(requests, 5).drop("score")


def test_the_python_api_and_an_export_serve_a_chosen_share(
    tmp_path, demo_dir, blended, retriever_ckpt
):
    """Share 0 orders the candidates as the retriever alone: the API and the exported program
    then recommend the retriever's own top items; the trained share orders them otherwise."""
    requests = histories(demo_dir, 40)
    retriever = top_items(recsys_seq.load(retriever_ckpt), requests)
    at_zero = top_items(recsys_seq.load(blended["checkpoint"], blend=0), requests)
    assert_frame_equal(at_zero, retriever)
    trained = top_items(recsys_seq.load(blended["checkpoint"]), requests)
    assert not trained.equals(retriever)  # else share 0 would prove nothing

    exported = recsys_seq.load(export_at(tmp_path / "zero", blended["checkpoint"], "blend=0"))
    assert_frame_equal(top_items(exported, requests), retriever)
    as_trained = recsys_seq.load(export_at(tmp_path / "trained", blended["checkpoint"]))
    assert_frame_equal(top_items(as_trained, requests), trained)
    between = top_items(recsys_seq.load(blended["checkpoint"], blend=0.3), requests)
    program = export_at(tmp_path / "between", blended["checkpoint"], "blend=0.3")
    assert_frame_equal(top_items(recsys_seq.load(program), requests), between)


def test_the_export_says_the_share_it_serves(tmp_path, blended):
    cfg = compose_config(
        "export",
        tmp_path / "run",
        [f"ckpt_path={blended['checkpoint']}", f"output={tmp_path / 'm.pt2'}", "blend=0.3"],
    )
    assert "with the ranker's share 0.3;" in summary(export(cfg))


def test_a_share_the_api_or_export_cannot_serve_is_refused(tmp_path, blended, retriever_ckpt):
    with pytest.raises(CheckpointError, match="a single model"):
        recsys_seq.load(retriever_ckpt, blend=0.5)
    for share in (1.5, float("nan"), True, "0.5"):
        with pytest.raises(ValueError, match="share in"):
            recsys_seq.load(blended["checkpoint"], blend=share)
    program = export_at(tmp_path / "program", blended["checkpoint"])
    with pytest.raises(ValueError, match="recsys-export blend"):
        recsys_seq.load(program, blend=0.5)

    output = tmp_path / "refused" / "model.pt2"
    for checkpoint, overrides, error in (
        (retriever_ckpt, ["blend=0.5"], CheckpointError),
        (blended["checkpoint"], ["blend=1.5"], OptionError),
        (blended["checkpoint"], ["blend=nan"], OptionError),
    ):
        with pytest.raises(error, match="blend"):
            export_at(output.parent, checkpoint, *overrides)
        assert not output.exists()


def test_two_processes_validate_a_share_exactly_like_one(tmp_path, blended):
    ddp = ["trainer=ddp_cpu", "trainer.devices=2", "trainer.strategy=ddp_spawn"]
    one = evaluate_at(tmp_path / "one", blended["checkpoint"], "stage=val", "blend=0.3")
    two = evaluate_at(tmp_path / "two", blended["checkpoint"], "stage=val", "blend=0.3", *ddp)
    keys = [k for k in one if k.split("/")[0] in ("val", "retriever", "ranker")]
    assert {k.split("/")[0] for k in keys} == {"val", "retriever", "ranker"}
    for key in keys:
        assert two[key] == pytest.approx(one[key], abs=1e-6), key
