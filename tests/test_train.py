"""End to end through the real conf/: prepare, train, test, evaluate a checkpoint."""

import itertools
import json
from pathlib import Path

import pytest
import torch

from recsys_seq.checkpoint import VocabularyMismatch
from recsys_seq.core.options import OptionError
from recsys_seq.models import PopularityRecommender
from recsys_seq.workflows.evaluate import evaluate
from recsys_seq.workflows.train import train
from tests.helpers import compose_config, train_config


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["model=gru", "model.side_features=[category,event]"],
        ["loss@model.loss=sampled_softmax", "model.loss.distribution=popularity"],
        ["loss@model.loss=bce", "data.max_tokens=2048"],
        ["trainer.precision=bf16-mixed"],
        ["loss@model.loss=in_batch", "data.train_windows=last"],
        ["loss@model.loss=mixed", "scheduler@model.scheduler=warmup_cosine"],
        ["model.encoder.norm=post", "model.encoder.positions=from_end"],
        ["data.train_windows=prefixes", "model=gru", "loss@model.loss=mixed"],
    ],
    ids=[
        "sasrec",
        "gru_side_features",
        "sampled_softmax",
        "bce_token_budget",
        "bf16",
        "in_batch_last_windows",
        "mixed_warmup_cosine",
        "post_norm_from_end",
        "gru_prefixes_mixed",
    ],
)
def test_fast_dev_run(tmp_path, demo_dir, overrides):
    cfg = train_config(tmp_path, demo_dir, "debug=fast", "data.sampled_negatives=100", *overrides)
    metrics, _ = train(cfg)
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written == pytest.approx(metrics)
    for key in (
        "test/ndcg@10",
        "test/hr@1",
        "test/mrr@20",
        "popularity/test/ndcg@10",
        "test/sampled100/ndcg@10",
        "popularity/test/sampled100/hr@10",
    ):
        assert 0.0 <= written[key] <= 1.0, key
    # 100 candidates are far easier than 2,000: the sampled figure must be the larger one
    assert written["popularity/test/sampled100/hr@10"] > written["popularity/test/hr@10"]
    assert not (tmp_path / "config.yaml").exists()  # the config is Hydra's .hydra/config.yaml


@pytest.mark.slow
def test_train_then_evaluate_checkpoint(tmp_path, demo_dir):
    run_dir = tmp_path / "run"
    cfg = train_config(
        run_dir, demo_dir, "trainer.max_epochs=2", "trainer.limit_train_batches=5", "logger=csv"
    )
    metrics, _ = train(cfg)
    best = Path(metrics["checkpoint"])
    assert best.is_file() and (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert {"val/ndcg@10", "val/best_ndcg@10", "popularity/val/ndcg@10"} <= metrics.keys()

    eval_cfg = compose_config("eval", tmp_path / "eval", [f"ckpt_path={best}"])
    evaluated, _ = evaluate(eval_cfg)
    for key, value in metrics.items():
        if key.startswith("test/"):
            assert evaluated[key] == pytest.approx(value, abs=1e-6), key

    # the same checkpoint under the other protocol: the user's history items excluded
    cfg = compose_config("eval", tmp_path / "excl", [f"ckpt_path={best}", "exclude_history=true"])
    excluded, objects = evaluate(cfg)
    assert objects["model"].exclude_history
    for key in ("test/ndcg@10", "popularity/test/ndcg@10"):
        assert excluded[key] != pytest.approx(evaluated[key], abs=1e-6), key


def test_last_checkpoint_follows_every_epoch_best_only_improvements(tmp_path, demo_dir):
    # lr 0: validation never improves after the first epoch, so best.ckpt stays at epoch 0
    cfg = train_config(
        tmp_path, demo_dir, "trainer.max_epochs=3", "trainer.limit_train_batches=2",
        "model.optimizer.lr=0", "callbacks.early_stopping=null",
    )  # fmt: skip
    train(cfg)
    saved = {
        name: torch.load(tmp_path / "checkpoints" / f"{name}.ckpt", weights_only=True)["epoch"]
        for name in ("best", "last")
    }
    assert saved == {"best": 0, "last": 2}


def test_unknown_side_feature_is_a_clear_error(tmp_path, demo_dir):
    cfg = train_config(tmp_path, demo_dir, "debug=fast", "model.side_features=[brand]")
    with pytest.raises(OptionError, match="brand"):
        train(cfg)


def test_prefix_windows_are_refused_for_din_which_trains_on_random_cuts(tmp_path, demo_dir):
    cfg = train_config(tmp_path, demo_dir, "debug=fast", "model=din", "data.train_windows=prefixes")
    with pytest.raises(OptionError, match="candidate_bce"):
        train(cfg)
    assert not (tmp_path / "metrics.json").exists()


def test_eval_refuses_another_item_vocabulary(tmp_path, demo_dir):
    cfg = train_config(tmp_path / "run", demo_dir, "debug=fast", "callbacks.model_checkpoint=null")
    _, objects = train(cfg)
    ckpt = tmp_path / "model.ckpt"
    objects["trainer"].save_checkpoint(ckpt)
    payload = torch.load(ckpt, weights_only=True)
    payload["recsys_seq"]["model"]["item_fingerprint"] = "0" * 64
    payload["recsys_seq"]["catalogue"] = None  # (its catalogue would no longer match either)
    torch.save(payload, ckpt)
    eval_cfg = compose_config("eval", tmp_path / "eval", [f"ckpt_path={ckpt}"])
    with pytest.raises(VocabularyMismatch, match="fingerprint"):
        evaluate(eval_cfg)


@pytest.mark.parametrize("limit", ["debug=fast", "+trainer.limit_test_batches=2"])
def test_a_shortened_evaluation_compares_with_popularity_on_the_same_users(
    tmp_path, demo_dir, capsys, limit
):
    cfg = train_config(tmp_path, demo_dir, limit, "trainer.max_epochs=1")
    metrics, objects = train(cfg)
    trainer, datamodule = objects["trainer"], objects["datamodule"]
    batches = sum(trainer.num_test_batches)
    assert batches < len(datamodule.dataloader("test", num_replicas=1, rank=0))
    baseline = PopularityRecommender(
        datamodule.data.item_counts, [10], objects["model"].exclude_history
    )
    loader = datamodule.dataloader("test", num_replicas=1, rank=0)
    same_users = baseline.evaluate(itertools.islice(loader, batches), "test")
    assert metrics["popularity/test/ndcg@10"] == pytest.approx(
        same_users["popularity/test/ndcg@10"]
    )
    printed = capsys.readouterr().out
    wrote_checkpoints = (tmp_path / "checkpoints").is_dir()
    assert ("Checkpoints:" in printed) is wrote_checkpoints
    assert wrote_checkpoints is (limit != "debug=fast")
