"""DIN (identity encoder + target-attention scorer + candidate BCE): masking, padding
invariance, chunked scoring, training pairs; sampled AUC/GAUC."""

import json

import numpy as np
import pytest
import torch

from recsys_seq.data import PaddedBatchCollator, Stage, WindowDataset
from recsys_seq.metrics import SampledAUC
from recsys_seq.models import NextItemTask, build_model, model_spec
from recsys_seq.models.candidate_bce import CandidateBCELoss
from recsys_seq.models.encoders.identity import IdentityEncoder
from recsys_seq.models.scorers import TargetAttentionScorer
from recsys_seq.models.target_attention import TargetAttention
from recsys_seq.workflows.train import train
from tests.helpers import random_histories, sequences, train_config

NUM_ITEMS = 30


def make_model(attention: str = "softmax", **scorer) -> NextItemTask:
    """conf/model/din.yaml's parts, small: D = 16, the category side feature summed in."""
    torch.manual_seed(0)
    spec = model_spec(
        {
            "name": "din",
            "encoder": {"name": "identity"},
            "scorer": {
                "name": "target_attention",
                "hidden": [12, 6],
                "attention": attention,
                "mlp_hidden": [20, 8],
                **scorer,
            },
            "loss": {"name": "candidate_bce"},
            "num_items": NUM_ITEMS,
            "embedding_dim": 16,
            "side_features": {"category": 4},  # helpers: category = item % 3 + 1
        }
    )
    return build_model(spec).eval()


def batch_of(histories, indices, stage=Stage.TEST, pad_to=None):
    dataset = WindowDataset(sequences(histories, NUM_ITEMS), stage, 16)
    return PaddedBatchCollator(pad_to)(dataset.__getitems__(list(indices)))


@pytest.mark.parametrize("attention", ["sum", "sigmoid", "softmax"])
def test_masked_positions_get_exactly_zero_weight(attention):
    model = make_model(attention)
    batch = batch_of(random_histories(6, NUM_ITEMS, 12), range(6))
    assert not batch["mask"].all()
    with torch.no_grad():
        keys = model.model.encode(batch)  # identity: the embedded events, PAD 0
        unit = model.model.scorer.attention
        weights = unit(keys, model.model.item_table[1:], batch["mask"][:, None])
    pad = ~batch["mask"][:, None].expand_as(weights)  # (B, C, T)
    assert (weights[pad] == 0).all()
    assert (weights[~pad] != 0).any()
    if attention == "softmax":
        assert torch.allclose(weights.sum(-1), torch.ones(()), atol=1e-6)


def test_decomposed_first_layer_equals_the_concatenated_form():
    torch.manual_seed(1)
    unit = TargetAttention(8, hidden=(6, 4), attention="sum")
    first = torch.nn.Linear(32, 6)
    unit.load_concat_weights(first.weight, first.bias)
    h, c = torch.randn(3, 5, 8), torch.randn(3, 7, 8)
    hh, cc = h[:, None].expand(-1, 7, -1, -1), c[:, :, None].expand(-1, -1, 5, -1)
    pairs = torch.cat([hh, cc, hh - cc, hh * cc], dim=-1)  # (B, C, T, 4D)
    expected = unit.rest(unit.first_activation(first(pairs))).squeeze(-1)
    got = unit(h, c, torch.ones(3, 1, 5, dtype=torch.bool))
    assert torch.allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("attention", ["sum", "softmax"])
@pytest.mark.parametrize("mates", ["short", "long", "extra_padding"])
def test_scores_do_not_depend_on_batch_mates_or_padding(attention, mates):
    histories = [[1, 2, 3, 4, 5, 6], [7, 8, 9], list(range(1, 17))]
    model = make_model(attention)
    with torch.no_grad():
        alone = model.score_next(batch_of(histories, [0]))[0]
        batch = {
            "short": batch_of(histories, [0, 1]),
            "long": batch_of(histories, [2, 0, 1]),
            "extra_padding": batch_of(histories, [0], pad_to=16),
        }[mates]
        row = batch["user"].tolist().index(0)
        assert torch.allclose(model.score_next(batch)[row], alone, atol=1e-5)


def test_chunked_scoring_equals_unchunked():
    model = make_model()
    batch = batch_of(random_histories(5, NUM_ITEMS, 12, seed=2), range(5))
    scorer = model.model.scorer
    with torch.no_grad():
        scorer.eval_chunk_size = NUM_ITEMS
        whole = model.score_next(batch)
        scorer.eval_chunk_size = 7  # 30 items: chunks of 7, 7, 7, 7, 2
        chunked = model.score_next(batch)
    assert whole.shape == (5, NUM_ITEMS + 1)
    assert torch.allclose(chunked, whole, atol=1e-6)


def test_all_item_scores_equal_candidate_scores_on_the_whole_window():
    """score_all (evaluation) and score (training, here with nothing cut off) agree."""
    model = make_model()
    batch = batch_of(random_histories(4, NUM_ITEMS, 12, seed=4), range(4))
    candidates = torch.randint(1, NUM_ITEMS + 1, (4, 9))
    with torch.no_grad():
        everything = model.score_next(batch)
        states = model.model.encode(batch)
        some = model.model.score(states, batch["mask"][:, None], candidates)
    assert torch.allclose(some, everything.gather(1, candidates), atol=1e-5)
    assert (everything[:, 0] == torch.finfo(everything.dtype).min).all()  # PAD's column


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
def test_training_pairs_and_no_gradient_reaches_pad():
    model = make_model().train()
    histories = random_histories(8, NUM_ITEMS, 12)
    dataset = WindowDataset(sequences(histories, NUM_ITEMS), Stage.TRAIN, 16)
    batch = PaddedBatchCollator()(dataset.__getitems__(list(range(len(dataset)))))
    assert not batch["mask"].all()
    cut, candidates = model.loss.sample(batch)
    assert ((cut >= 1) & (cut <= batch["lengths"][:, None])).all()
    assert (candidates[..., 0] == batch["targets"].gather(1, cut - 1)).all()
    negatives = candidates[..., 1:]
    assert ((negatives >= 1) & (negatives <= NUM_ITEMS)).all()
    assert (negatives != candidates[..., :1]).all()
    model.training_step(batch, 0).backward()
    embedder = model.model.embedder
    grad = embedder.items.weight.grad
    assert grad[0].abs().max() == 0
    assert grad[1:].abs().sum() > 0
    for table in embedder.features.values():
        assert table.weight.grad[0].abs().max() == 0
        assert table.weight.grad[1:].abs().sum() > 0


def reference_auc(positive, negatives, weight):
    per_user = ((negatives < positive[:, None]) + 0.5 * (negatives == positive[:, None])).mean(1)
    return per_user.mean(), (weight * per_user).sum() / weight.sum()


def test_auc_and_gauc_equal_brute_force_and_merge_exactly():
    rng = np.random.default_rng(0)
    users, n = 40, 10
    positive = rng.integers(0, 5, users).astype(np.float32)  # small ints: many ties
    negatives = rng.integers(0, 5, (users, n)).astype(np.float32)
    weight = rng.integers(1, 20, users)
    auc, gauc = reference_auc(positive, negatives, weight)

    whole = SampledAUC()
    whole.update(torch.from_numpy(positive), torch.from_numpy(negatives), torch.from_numpy(weight))
    result = whole.compute()
    assert result["auc"].item() == pytest.approx(auc, abs=1e-12)
    assert result["gauc"].item() == pytest.approx(gauc, abs=1e-12)

    # two "ranks" with uneven shares, merged as DDP's sum reduction would
    ranks = [SampledAUC(), SampledAUC()]
    for metric, part in zip(ranks, (slice(0, 13), slice(13, None)), strict=True):
        metric.update(
            torch.from_numpy(positive[part]),
            torch.from_numpy(negatives[part]),
            torch.from_numpy(weight[part]),
        )
    ranks[0].merge_state(ranks[1])
    merged = ranks[0].compute()
    assert torch.equal(merged["auc"], result["auc"]) and torch.equal(merged["gauc"], result["gauc"])


def test_fast_dev_run_through_the_real_config(tmp_path, demo_dir):
    cfg = train_config(
        tmp_path,
        demo_dir,
        "model=din",
        "debug=fast",
        "data.eval_batch_size=16",
        "data.sampled_negatives=100",
    )
    metrics, objects = train(cfg)
    task = objects["model"]
    assert isinstance(task, NextItemTask) and task.spec.name == "din"
    assert isinstance(task.model.encoder, IdentityEncoder)
    assert isinstance(task.model.scorer, TargetAttentionScorer)
    assert isinstance(task.loss, CandidateBCELoss)
    written = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("test/ndcg@10", "test/hr@10", "test/sampled100/auc", "test/sampled100/gauc"):
        assert 0.0 <= written[key] <= 1.0, key
