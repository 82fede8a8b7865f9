"""Learning-rate schedules: warm-up then cosine decay, per training step."""

import math

import pytest
import torch

from recsys_seq.core.options import OptionError
from recsys_seq.models.spec import WarmupCosineOptions, model_spec
from recsys_seq.models.task import warmup_cosine


def learning_rates(options: WarmupCosineOptions, total: int, lr: float = 0.01) -> list[float]:
    parameter = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.AdamW([parameter], lr=lr)
    scheduler = warmup_cosine(optimizer, options, total)
    rates = []
    for _ in range(total):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize(("warmup", "floor"), [(0.1, 0.0), (0.25, 0.1), (0.0, 0.5)])
def test_warmup_rises_linearly_to_the_peak_then_decays_along_a_cosine(warmup, floor):
    total, lr = 200, 0.01
    rates = learning_rates(WarmupCosineOptions(warmup=warmup, min_lr_ratio=floor), total, lr)
    steps = max(int(warmup * total), 1)
    rise = rates[: steps + 1]
    assert rise == pytest.approx([lr * (i + 1) / (steps + 1) for i in range(steps + 1)], rel=1e-6)
    decay = rates[steps:]
    assert all(a >= b for a, b in zip(decay, decay[1:], strict=False))
    span = total - steps
    for i in (span // 4, span // 2, span - 1):  # the cosine's own values
        expected = floor * lr + (lr - floor * lr) * (1 + math.cos(math.pi * i / span)) / 2
        assert decay[i] == pytest.approx(expected, rel=1e-4)
    assert min(decay) >= floor * lr - 1e-12


def test_a_run_without_an_end_cannot_be_scheduled():
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(OptionError, match="trainer.max_epochs or trainer.max_steps"):
        warmup_cosine(optimizer, WarmupCosineOptions(), math.inf)


@pytest.mark.parametrize(
    "scheduler",
    [
        {"name": "warmup_cosine", "warmup": 1.0},
        {"name": "warmup_cosine", "min_lr_ratio": -0.1},
        {"name": "warmup_cosine", "factor": 0.5},  # a plateau option
        {"name": "cosine"},
    ],
)
def test_bad_scheduler_options_are_refused(scheduler):
    with pytest.raises(OptionError, match="scheduler"):
        model_spec(
            {"name": "m", "encoder": {"name": "gru"}, "num_items": 5, "scheduler": scheduler}
        )


def test_both_schedulers_are_read_back_from_plain_values():
    for values in ({"name": "reduce_on_plateau", "patience": 3}, {"name": "warmup_cosine"}):
        spec = model_spec(
            {"name": "m", "encoder": {"name": "gru"}, "num_items": 5, "scheduler": values}
        )
        assert spec.scheduler.name == values["name"]
