"""Losses: PAD positions never count, sampled losses behave as their definitions say."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from recsys_seq import configs
from recsys_seq.core.options import OptionError
from recsys_seq.data import IGNORE_INDEX
from recsys_seq.models import ItemEmbedder, NextItemModel, build_model, model_spec
from recsys_seq.models.candidate_bce import CandidateBCELoss
from recsys_seq.models.encoders.identity import IdentityEncoder
from recsys_seq.models.full_softmax import FullSoftmaxLoss
from recsys_seq.models.sampled_losses import (
    BinaryCrossEntropyLoss,
    GeneralisedBCELoss,
    SampledSoftmaxLoss,
    gather_rows,
)
from recsys_seq.models.scorers import DotProductScorer

N, D = 20, 8
COUNTS = np.arange(N + 1)  # popularity grows with the index; PAD 0


def inputs(seed=0):
    """``states (3, 5, D)``, a batch whose rows hold 5, 3 and 1 real positions, and a
    dot-product model whose item table (PAD row included) is random."""
    g = torch.Generator().manual_seed(seed)
    states = torch.randn(3, 5, D, generator=g)
    items = torch.randn(N + 1, D, generator=g)
    targets = torch.randint(1, N + 1, (3, 5), generator=g)
    targets[1, 3:] = IGNORE_INDEX
    targets[2, 1:] = IGNORE_INDEX
    mask = targets != IGNORE_INDEX
    batch = {"targets": targets, "mask": mask, "lengths": mask.sum(1)}
    embedder = ItemEmbedder(N, D, {})
    with torch.no_grad():
        embedder.items.weight.copy_(items)  # a non-zero PAD row: losses must skip it anyway
    model = NextItemModel(embedder, IdentityEncoder(), DotProductScorer())
    return states, batch, model


@pytest.mark.parametrize(
    "loss",
    [
        FullSoftmaxLoss(),
        SampledSoftmaxLoss(8, "uniform", item_counts=COUNTS),
        SampledSoftmaxLoss(8, "popularity", item_counts=COUNTS),
        SampledSoftmaxLoss(0, in_batch=True, item_counts=COUNTS),
        SampledSoftmaxLoss(8, "uniform", in_batch=True, item_counts=COUNTS),
        BinaryCrossEntropyLoss(2, item_counts=COUNTS),
        GeneralisedBCELoss(N, 4, 0.75, item_counts=COUNTS),
        CandidateBCELoss(N, num_negatives=4, cuts_per_window=3),
    ],
    ids=[
        "full",
        "sampled_uniform",
        "sampled_popularity",
        "in_batch",
        "mixed",
        "bce",
        "gbce",
        "candidate_bce",
    ],
)
def test_pad_positions_do_not_change_the_loss(loss):
    states, batch, model = inputs()
    torch.manual_seed(1)
    before = loss(states, batch, model)
    scrambled = states.clone()
    scrambled[~batch["mask"]] = 1e3  # garbage in PAD slots
    torch.manual_seed(1)
    after = loss(scrambled, batch, model)
    assert torch.isfinite(before) and torch.allclose(before, after)


def test_full_softmax_is_cross_entropy_over_real_items():
    states, batch, model = inputs()
    targets = batch["targets"]
    logits = states @ model.item_table[1:].T  # PAD excluded from the classes
    real = targets != IGNORE_INDEX
    expected = F.cross_entropy(logits[real], targets[real] - 1)
    assert torch.allclose(FullSoftmaxLoss()(states, batch, model), expected, atol=1e-6)


def test_sampled_softmax_with_all_items_as_negatives_approaches_full_softmax():
    """Uniform log-Q is a constant shift, so with every item drawn the losses coincide
    (up to the duplicates of sampling with replacement)."""
    states, batch, model = inputs()
    loss = SampledSoftmaxLoss(20_000, "uniform", item_counts=COUNTS)
    torch.manual_seed(0)
    sampled = loss(states, batch, model)
    full = FullSoftmaxLoss()(states, batch, model)
    # each item appears ~1000 times among the negatives: log(1000) shift, same ranking signal
    assert abs((sampled - full).item() - math.log(1000)) < 0.2


def test_log_q_correction_makes_popularity_sampling_estimate_the_full_softmax():
    """With the log-Q correction, K negatives drawn by popularity q estimate K times the full
    partition function: ``sum_k exp(s_k) / q_k ~ K * sum_i exp(s_i)``. The loss then
    converges to ``-log(a / (a + K * sum_{i != t} exp(s_i)))`` with ``a = exp(s_t) / q_t``
    (accidental hits of the target are removed), whatever q is; without the correction it
    would converge to the same expression with ``a = exp(s_t)`` and ``exp(s_i)`` weighted by
    ``q_i``, which is far from it here."""
    states, batch, model = inputs()
    K = 200_000
    loss = SampledSoftmaxLoss(K, "popularity", item_counts=COUNTS)
    torch.manual_seed(0)
    sampled = loss(states, batch, model).item()

    real = batch["mask"]
    scores = (states[real] @ model.item_table.T).double().exp()[:, 1:]  # (R, N) exp(s_i)
    target = batch["targets"][real] - 1  # (R,) column of the target
    q = torch.as_tensor(COUNTS[1:] / COUNTS.sum(), dtype=torch.float64)  # (N,)
    others = torch.ones_like(scores).scatter(1, target[:, None], 0.0)  # i != t

    def limit(positive: torch.Tensor, weights: torch.Tensor) -> float:
        rest = K * (scores * weights * others).sum(1)
        return torch.log1p(rest / positive).mean().item()

    corrected = limit(scores.gather(1, target[:, None])[:, 0] / q[target], torch.ones(N))
    uncorrected = limit(scores.gather(1, target[:, None])[:, 0], q)
    assert sampled == pytest.approx(corrected, abs=0.05)
    assert abs(uncorrected - corrected) > 0.4, "the correction must matter for this test"


def test_candidate_bce_is_binary_cross_entropy_of_the_scorer_at_each_cut():
    """DIN's objective with any scorer; with the dot product, a candidate's logit is its dot
    with the state after the last visible event, ``states[b, cut - 1]``."""
    states, batch, model = inputs()
    loss = CandidateBCELoss(N, num_negatives=5, cuts_per_window=4)
    torch.manual_seed(3)
    cut, candidates = loss.sample(batch)  # (B, S), (B, S, 1 + K)
    torch.manual_seed(3)
    value = loss(states, batch, model)
    assert ((cut >= 1) & (cut <= batch["lengths"][:, None])).all()
    assert (candidates[..., 0] == batch["targets"].gather(1, cut - 1)).all()
    summary = states.gather(1, (cut - 1)[..., None].expand(-1, -1, D))  # (B, S, D)
    logits = (summary[:, :, None] * model.item_table[candidates]).sum(-1)  # (B, S, 1 + K)
    labels = torch.zeros_like(logits)
    labels[..., 0] = 1.0
    expected = F.binary_cross_entropy_with_logits(logits, labels)
    assert torch.allclose(value, expected, atol=1e-6)


def test_negatives_never_include_pad():
    counts = np.r_[50, np.ones(N - 1), 30]  # PAD's count must be ignored
    loss = SampledSoftmaxLoss(4, "popularity", item_counts=counts)
    drawn = loss.draw((10_000,))
    assert drawn.min() >= 1 and drawn.max() <= N
    # popularity: the most popular item is drawn most often
    assert torch.bincount(drawn, minlength=N + 1).argmax() == N
    uniform = BinaryCrossEntropyLoss(1, item_counts=counts).draw((10_000,))
    assert uniform.min() >= 1 and uniform.max() <= N


@pytest.mark.parametrize(
    "loss",
    [SampledSoftmaxLoss(4), BinaryCrossEntropyLoss(1), GeneralisedBCELoss(N, 4)],
    ids=["sampled_softmax", "bce", "gbce"],
)
def test_negative_sampling_requires_item_counts(loss):
    states, batch, model = inputs()
    with pytest.raises(RuntimeError, match="item counts"):
        loss(states, batch, model)


def reference_pool_loss(states, batch, model, drawn, expected_count, in_batch=True):
    """The pooled softmax written out position by position: the target against the drawn
    items and (``in_batch``) the real positions' targets, every item different from the
    target, each logit minus log(its expected count in the pool)."""
    targets = batch["targets"]
    real = targets != IGNORE_INDEX
    others = targets[real] if in_batch else torch.empty(0, dtype=torch.long)
    log_q = torch.log(torch.as_tensor(expected_count, dtype=torch.float32))
    losses = []
    for b, t in torch.nonzero(real).tolist():
        target = targets[b, t]
        pool = torch.cat([drawn, others])
        pool = pool[pool != target]
        scores = model.item_table[torch.cat([target[None], pool])] @ states[b, t]
        logits = scores - log_q[torch.cat([target[None], pool])]
        losses.append(-F.log_softmax(logits, 0)[0])
    return torch.stack(losses).mean()


@pytest.mark.parametrize("num_negatives", [0, 6], ids=["in_batch", "mixed"])
def test_in_batch_and_mixed_negatives_are_the_pooled_softmax_with_mixture_log_q(num_negatives):
    states, batch, model = inputs()
    loss = SampledSoftmaxLoss(num_negatives, "uniform", in_batch=True, item_counts=COUNTS)
    torch.manual_seed(4)
    value = loss(states, batch, model)
    torch.manual_seed(4)
    drawn = loss.draw((num_negatives,)) if num_negatives else torch.empty(0, dtype=torch.long)
    real = int((batch["targets"] != IGNORE_INDEX).sum())
    uniform = np.r_[0, np.full(N, 1 / N)]
    popularity = COUNTS / COUNTS.sum()
    expected = num_negatives * uniform + real * popularity  # times each item is in the pool
    expected[0] = 1.0  # PAD: never a target, never in the pool
    reference = reference_pool_loss(states, batch, model, drawn, expected)
    assert torch.allclose(value, reference, atol=1e-5)


def test_drawn_negatives_follow_the_same_pooled_definition():
    states, batch, model = inputs()
    loss = SampledSoftmaxLoss(7, "popularity", item_counts=COUNTS)
    torch.manual_seed(5)
    value = loss(states, batch, model)
    torch.manual_seed(5)
    drawn = loss.draw((7,))
    expected = np.maximum(7 * COUNTS / COUNTS.sum(), 1e-30)
    reference = reference_pool_loss(states, batch, model, drawn, expected, in_batch=False)
    assert torch.allclose(value, reference, atol=1e-5)


def test_in_batch_negatives_train_their_gradient_into_the_other_targets_only():
    """A position's loss pushes down the batch's other targets, never an item outside the
    pool, and PAD positions give no gradient to anything."""
    states, batch, model = inputs()
    states.requires_grad_(True)
    loss = SampledSoftmaxLoss(0, in_batch=True, item_counts=COUNTS)
    loss(states, batch, model).backward()
    grad = model.embedder.items.weight.grad
    in_pool = torch.zeros(N + 1, dtype=torch.bool)
    in_pool[batch["targets"][batch["mask"]]] = True
    assert (grad[~in_pool] == 0).all() and (grad[in_pool].abs().sum(1) > 0).all()
    assert (states.grad[~batch["mask"]] == 0).all()


def test_a_pool_with_no_negatives_is_refused():
    with pytest.raises(ValueError, match="num_negatives >= 1 or in_batch"):
        SampledSoftmaxLoss(0, in_batch=False, item_counts=COUNTS)


def test_rows_gathered_together_equal_each_lookup_alone_in_value_and_gradient():
    g = torch.Generator().manual_seed(7)
    table = torch.randn(N + 1, D, generator=g, requires_grad=True)
    first = torch.randint(0, N + 1, (3, 4), generator=g)
    second = torch.randint(0, N + 1, (5,), generator=g)
    third = torch.randint(0, N + 1, (2, 2, 3), generator=g)  # repeats across lookups too
    weights = [torch.randn(*i.shape, D, generator=g) for i in (first, second, third)]
    rows = gather_rows(table, first, second, third)
    assert [r.shape for r in rows] == [(3, 4, D), (5, D), (2, 2, 3, D)]
    sum((r * w).sum() for r, w in zip(rows, weights, strict=True)).backward()
    together = table.grad.clone()
    table.grad = None
    alone = [table[i] for i in (first, second, third)]
    for r, a in zip(rows, alone, strict=True):
        assert torch.equal(r, a)
    sum((a * w).sum() for a, w in zip(alone, weights, strict=True)).backward()
    assert torch.allclose(together, table.grad, atol=1e-6)


def _gbce_beta(k: int, t: float) -> float:
    alpha = k / (N - 1)
    return alpha * (t * (1 - 1 / alpha) + 1 / alpha)


@pytest.mark.parametrize(
    ("loss", "beta"),
    [
        (BinaryCrossEntropyLoss(3, item_counts=COUNTS), 1.0),
        (GeneralisedBCELoss(N, 5, 0.75, item_counts=COUNTS), _gbce_beta(5, 0.75)),
    ],
    ids=["bce", "gbce"],
)
def test_bce_is_softplus_of_the_target_and_of_each_drawn_negative(loss, beta):
    """Written out position by position: ``beta softplus(-s(target)) + sum softplus(s(neg))``
    over the real positions, with the negatives the loss drew (beta 1 for BCE; for gBCE
    ``alpha (t (1 - 1/alpha) + 1/alpha)``, ``alpha = K / (N - 1)``); the item table's gradient
    too."""
    states, batch, model = inputs()
    k = loss.num_negatives
    torch.manual_seed(6)
    value = loss(states, batch, model)
    value.backward()
    grad = model.embedder.items.weight.grad.clone()
    model.embedder.items.weight.grad = None
    torch.manual_seed(6)
    drawn = loss.draw((*batch["targets"].shape, k))
    table = model.item_table
    terms = [
        beta * F.softplus(-(table[batch["targets"][b, t]] @ states[b, t]))
        + F.softplus(table[drawn[b, t]] @ states[b, t]).sum()
        for b, t in torch.nonzero(batch["mask"]).tolist()
    ]
    reference = torch.stack(terms).mean()
    reference.backward()
    assert torch.allclose(value, reference, atol=1e-6)
    assert torch.allclose(grad, model.embedder.items.weight.grad, atol=1e-6)


@pytest.mark.parametrize(("calibration", "beta"), [(0.0, 1.0), (1.0, 4 / (N - 1))])
def test_gbce_runs_from_plain_bce_to_the_sampling_rate(calibration, beta):
    """t = 0 is SASRec's BCE (beta 1), t = 1 divides the target's term by (N - 1) / K."""
    gbce = GeneralisedBCELoss(N, 4, calibration, item_counts=COUNTS)
    assert gbce.positive_weight == pytest.approx(beta)
    if calibration == 0.0:
        states, batch, model = inputs()
        torch.manual_seed(2)
        expected = BinaryCrossEntropyLoss(4, item_counts=COUNTS)(states, batch, model)
        torch.manual_seed(2)
        assert torch.allclose(gbce(states, batch, model), expected)


@pytest.mark.parametrize(
    ("loss", "message"),
    [
        ({"calibration": 1.5}, "model.loss.calibration must be"),
        ({"calibration": -0.1}, "model.loss.calibration must be"),
        ({"calibration": "high"}, "model.loss.calibration must be"),
        ({"num_negatives": 0}, "model.loss.num_negatives must be"),
    ],
)
def test_wrong_gbce_options_are_refused_naming_them(loss, message):
    spec = {
        "name": "sasrec",
        "encoder": {"name": "self_attention", "max_len": 8},
        "num_items": 10,
        "loss": {"name": "gbce", **loss},
    }
    with pytest.raises(OptionError, match=message):
        model_spec(spec)


def test_loss_gbce_builds_from_its_config(tmp_path):
    """``loss@model.loss=gbce`` composes, and the built loss draws from the data's catalogue."""
    cfg = configs.compose_train(["loss@model.loss=gbce"])
    values = configs.plain(cfg.model.loss)
    assert values == {"name": "gbce", "num_negatives": 256, "calibration": 0.75}
    task = build_model(
        model_spec(
            {
                "name": "sasrec",
                "encoder": {"name": "self_attention", "max_len": 8},
                "num_items": 300,
                "loss": values,
            }
        )  # fmt: skip
    )
    assert isinstance(task.loss, GeneralisedBCELoss)
    assert task.loss.positive_weight == pytest.approx(
        (256 / 299) * (0.75 * (1 - 299 / 256) + 299 / 256)
    )
