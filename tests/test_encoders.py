"""Every registered encoder keeps the SequenceEncoder contract; optimiser groups decay only
weight matrices."""

import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from recsys_seq import configs
from recsys_seq.data.batch import padding_mask
from recsys_seq.models import ENCODERS, NextItemTask, build_model, model_spec
from recsys_seq.models.encoders.frequency_attention import SpectralFilter
from recsys_seq.models.target_attention import ChannelPReLU
from tests.helpers import D, assert_encoder_contract, encoder_with

VARIANTS = [(name, {}) for name in ENCODERS.names()] + [
    ("self_attention", {"norm": "post"}),
    ("self_attention", {"positions": "from_end"}),
    ("frequency_attention", {"low_frequencies": 1, "filter_weight": 1.0}),
]


@pytest.mark.parametrize(
    ("name", "options"),
    VARIANTS,
    ids=[f"{n}{''.join(f'-{v}' for v in o.values())}" for n, o in VARIANTS],
)
def test_every_encoder_is_padding_safe_and_causal_or_says_it_is_not(name, options):
    whole_window = getattr(ENCODERS.options(name), "sees_whole_window", False)
    assert_encoder_contract(encoder_with(name, **options), causal=not whole_window)


def test_every_conf_encoder_is_registered():
    shipped = {p.stem for p in (Path(configs.CONF_DIR) / "encoder").glob("*.yaml")}
    assert shipped <= set(ENCODERS.names())


def make_task(kind: str, weight_decay: float) -> NextItemTask:
    encoders = {
        "sasrec": {"name": "self_attention", "max_len": 8},
        "bsarec": {"name": "frequency_attention", "max_len": 8},
        "gru": {"name": "gru", "hidden_size": 24},
        "din": {"name": "identity"},
    }
    parts = {"din": {"scorer": {"name": "target_attention"}, "loss": {"name": "candidate_bce"}}}
    spec = model_spec(
        {
            "name": kind,
            "encoder": encoders[kind],
            **parts.get(kind, {}),
            "num_items": 30,
            "embedding_dim": D,
            "side_features": {"category": 4},
            "optimizer": {"name": "adamw", "lr": 0.01, "weight_decay": weight_decay},
        }
    )
    return build_model(spec)


def expected_decay(module: nn.Module, name: str, decay: float) -> float:
    """The weight decay of ``module``'s own parameter ``name`` (position tables aside)."""
    if isinstance(module, nn.LayerNorm | ChannelPReLU | SpectralFilter):
        return 0.0  # norm scales and shifts, activation slopes, per-channel filter weights
    if isinstance(module, nn.Linear | nn.GRU):
        return 0.0 if name.startswith("bias") else decay  # GRU: weight_ih_l0, bias_hh_l0, ...
    if isinstance(module, nn.Embedding):
        return decay  # items and side features: the model's capacity per item
    raise AssertionError(f"no rule for {type(module).__name__}.{name}: decide and add one")


@pytest.mark.parametrize("kind", ["sasrec", "bsarec", "gru", "din"])
def test_weight_decay_applies_to_weight_matrices_only(kind):
    task = make_task(kind, weight_decay=0.1)
    optimizer = task.configure_optimizers()
    decay_of: dict[int, float] = {}
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            assert id(parameter) not in decay_of, "a parameter is in two groups"
            decay_of[id(parameter)] = group["weight_decay"]
    named = dict(task.named_parameters())
    assert set(decay_of) == {id(p) for p in named.values()}, "every parameter is in a group"

    positions = getattr(task.model.encoder, "positions", None)
    for prefix, module in task.named_modules():
        for name, parameter in module.named_parameters(recurse=False):
            where = f"{prefix}.{name}"
            expected = 0.0 if module is positions else expected_decay(module, name, 0.1)
            assert decay_of[id(parameter)] == expected, where

    # the kinds the rule is about are all present where the model has them
    embedder = task.model.embedder
    assert decay_of[id(embedder.items.weight)] == 0.1
    assert decay_of[id(embedder.features["category"].weight)] == 0.1
    linears = [m for m in task.modules() if isinstance(m, nn.Linear)]
    assert linears or kind == "gru"
    assert all(decay_of[id(m.weight)] == 0.1 for m in linears)
    assert all(decay_of[id(m.bias)] == 0.0 for m in linears if m.bias is not None)
    if kind in ("sasrec", "bsarec"):
        norms = [m for m in task.modules() if isinstance(m, nn.LayerNorm)]
        assert norms and all(decay_of[id(m.weight)] == 0.0 for m in norms)
        assert decay_of[id(positions.weight)] == 0.0
        assert "model.encoder.positions.weight" in named


def test_optimizer_takes_the_specs_learning_rate_and_decay():
    optimizer = make_task("sasrec", weight_decay=0.0).configure_optimizers()
    assert isinstance(optimizer, torch.optim.AdamW)
    assert all(group["lr"] == 0.01 for group in optimizer.param_groups)
    assert all(group["weight_decay"] == 0.0 for group in optimizer.param_groups)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_norm_placement_decides_whether_each_block_hands_on_a_normalised_stream(norm):
    """``post`` normalises every residual sum, so a block's output has zero mean and unit
    variance per position (LayerNorm's initial scale and shift); ``pre`` adds each branch's
    output to the unnormalised stream."""
    encoder = encoder_with("self_attention", norm=norm)
    outputs = []
    encoder.blocks[0].register_forward_hook(lambda module, args, out: outputs.append(out))
    lengths = torch.tensor([6, 3])
    x = 3 * torch.randn(2, 6, D, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        encoder(x, padding_mask(lengths, 6), lengths)
    real = outputs[0][padding_mask(lengths, 6)]  # (R, D)
    normalised = torch.allclose(
        real.mean(-1), torch.zeros(len(real)), atol=1e-4
    ) and torch.allclose(real.var(-1, unbiased=False), torch.ones(len(real)), atol=1e-3)
    assert normalised == (norm == "post")


@pytest.mark.parametrize("optimizer", ["adamw", "adam"])
def test_the_optimizer_steps_fused_and_as_the_looped_one_would(optimizer):
    """One kernel over all tensors (the item table dominates a small step) with the same
    arithmetic as torch's per-tensor loop."""

    def trained(fused: bool | None):
        torch.manual_seed(0)
        task = make_task("sasrec", weight_decay=0.1)
        task.spec = dataclasses.replace(
            task.spec, optimizer=dataclasses.replace(task.spec.optimizer, name=optimizer)
        )
        chosen = task.configure_optimizers()
        if fused is not None:  # the same groups, stepped the other way
            groups = [
                {k: g[k] for k in ("params", "lr", "weight_decay")} for g in chosen.param_groups
            ]
            chosen = type(chosen)(groups, fused=fused)
        torch.manual_seed(1)
        for _ in range(3):
            chosen.zero_grad()
            loss = sum((p**2).sum() * torch.rand(()) for p in task.parameters())
            loss.backward()
            chosen.step()
        return chosen, [p.detach().clone() for p in task.parameters()]

    chosen, fused = trained(None)
    assert all(group["fused"] for group in chosen.param_groups)
    _, looped = trained(False)
    for a, b in zip(fused, looped, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
