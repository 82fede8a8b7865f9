"""callbacks=weight_average: validation, the checkpoints, the run's own test and recsys-eval all
read one set of weights, the running average, never the raw weights of the last step."""

import pytest
import torch
from lightning.pytorch import Callback

from recsys_seq.core.objects import make
from recsys_seq.core.options import OptionError
from recsys_seq.workflows.evaluate import evaluate
from recsys_seq.workflows.train import train
from tests.helpers import compose_config, train_config

LIMITS = ("trainer.limit_val_batches=2", "trainer.limit_test_batches=2")


def only_test(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k.startswith("test/")}


def eval_metrics(ckpt, folder) -> dict:
    cfg = compose_config("eval", folder, [f"ckpt_path={ckpt}", "baselines=false", LIMITS[1]])
    return only_test(evaluate(cfg)[0])


@pytest.mark.slow
def test_the_run_tests_the_averaged_weights_its_validation_chose(tmp_path, demo_dir):
    cfg = train_config(
        tmp_path / "run",
        demo_dir,
        "callbacks=weight_average",
        "callbacks.weight_average.decay=0.5",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=4",
        "baselines=false",
        "logger=[]",
        *LIMITS,
    )
    metrics, _ = train(cfg)
    best = torch.load(metrics["checkpoint"], weights_only=True)
    averaged, raw = best["state_dict"], best["current_model_state"]
    assert averaged.keys() == raw.keys()
    assert any(not torch.equal(averaged[k], raw[k]) for k in averaged), "nothing was averaged"

    # the same checkpoint with its raw weights in place of the average
    raw_ckpt = tmp_path / "raw.ckpt"
    torch.save({**best, "state_dict": raw}, raw_ckpt)

    run = only_test(metrics)
    assert run == eval_metrics(metrics["checkpoint"], tmp_path / "eval")
    assert run != eval_metrics(raw_ckpt, tmp_path / "eval_raw")


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5, 1.5])
def test_a_decay_outside_zero_to_one_is_refused_naming_the_option(decay):
    values = {"_target_": "recsys_seq.callbacks.WeightAverage", "decay": decay}
    with pytest.raises(OptionError, match=r"callbacks.weight_average .*decay"):
        make("callbacks.weight_average", values, Callback)


def test_options_of_lightnings_averaged_model_are_not_taken():
    """Only ``decay``: the average always covers parameters and buffers, on the model's device."""
    values = {"_target_": "recsys_seq.callbacks.WeightAverage", "use_buffers": False}
    with pytest.raises(OptionError, match="use_buffers"):
        make("callbacks.weight_average", values, Callback)
