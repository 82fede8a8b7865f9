"""Model invariants: padding and batch mates never change a user's output; no peeking ahead."""

import pytest
import torch

from recsys_seq.data import PaddedBatchCollator, Stage, WindowDataset
from recsys_seq.models import NextItemTask, PopularityRecommender, build_model, model_spec
from tests.helpers import random_histories, sequences

NUM_ITEMS = 30


ENCODERS = {
    "sasrec": {"name": "self_attention", "max_len": 16, "num_layers": 2, "num_heads": 2},
    "sasrec_from_end": {
        "name": "self_attention",
        "max_len": 16,
        "num_layers": 2,
        "num_heads": 2,
        "positions": "from_end",
    },
    "gru": {"name": "gru", "hidden_size": 24, "num_layers": 2},
}


def make_model(kind: str = "sasrec", **values) -> NextItemTask:
    """A dot-product model over the ``kind`` encoder, D = 16, in eval mode."""
    torch.manual_seed(0)
    spec = model_spec(
        {
            "name": kind,
            "encoder": ENCODERS[kind],
            "num_items": NUM_ITEMS,
            "embedding_dim": 16,
            **values,
        }
    )
    return build_model(spec).eval()


def eval_batch(histories, indices, pad_to=None, max_len=16):
    dataset = WindowDataset(sequences(histories, NUM_ITEMS), Stage.TEST, max_len)
    return PaddedBatchCollator(pad_to)(dataset.__getitems__(list(indices)))


def train_batch(histories, max_len=16):
    dataset = WindowDataset(sequences(histories, NUM_ITEMS), Stage.TRAIN, max_len)
    return PaddedBatchCollator()(dataset.__getitems__(list(range(len(dataset)))))


@pytest.mark.parametrize("kind", ENCODERS)
@pytest.mark.parametrize("mates", ["alone", "short", "long", "extra_padding"])
def test_scores_do_not_depend_on_batch_mates_or_padding(kind, mates):
    histories = [[1, 2, 3, 4, 5, 6], [7, 8, 9], list(range(1, 17))]
    model = make_model(kind)
    with torch.no_grad():
        alone = model.score_next(eval_batch(histories, [0]))[0]
        batch = {
            "alone": eval_batch(histories, [0]),
            "short": eval_batch(histories, [0, 1]),
            "long": eval_batch(histories, [2, 0, 1]),
            "extra_padding": eval_batch(histories, [0], pad_to=16),
        }[mates]
        row = batch["user"].tolist().index(0)
        assert torch.allclose(model.score_next(batch)[row], alone, atol=1e-5)


def test_self_attention_cannot_see_the_future():
    model = make_model()
    items = torch.tensor([[3, 5, 7, 9, 11]])
    mask = torch.ones_like(items, dtype=torch.bool)
    lengths = torch.tensor([5])
    changed = items.clone()
    changed[0, 3] = 2
    with torch.no_grad():
        before = model.model.encode({"items": items, "mask": mask, "lengths": lengths})
        after = model.model.encode({"items": changed, "mask": mask, "lengths": lengths})
    assert torch.allclose(before[:, :3], after[:, :3], atol=1e-6)
    assert not torch.allclose(before[:, 3], after[:, 3])


def test_gru_equals_an_unbatched_run_per_sequence():
    model = make_model("gru")
    histories = random_histories(6, NUM_ITEMS, 12, seed=1)
    batch = eval_batch(histories, range(6))
    encoder = model.model.encoder
    with torch.no_grad():
        batched = model.model.encode(batch)
        for row, length in enumerate(batch["lengths"].tolist()):
            x = model.model.embedder({"items": batch["items"][row : row + 1, :length]})
            alone, _ = encoder.gru(x)
            expected = encoder.out(alone)[0]
            assert torch.allclose(batched[row, :length], expected, atol=1e-6)


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
@pytest.mark.parametrize("kind", ENCODERS)
def test_pad_outputs_are_zero_and_pad_gets_no_gradient(kind):
    model = make_model(kind).train()
    batch = train_batch(random_histories(8, NUM_ITEMS, 12))
    assert not batch["mask"].all(), "the batch must contain padding for this test to mean anything"
    hidden = model.model.encode(batch)
    assert hidden[~batch["mask"]].abs().max() == 0
    model.training_step(batch, 0).backward()
    grad = model.model.embedder.items.weight.grad
    assert grad[0].abs().max() == 0
    assert grad[1:].abs().sum() > 0


def test_side_features_are_summed_into_the_event_embedding():
    model = make_model(side_features={"category": 4})  # helpers: category = item % 3 + 1
    batch = eval_batch(random_histories(5, NUM_ITEMS, 12, seed=3), range(5))
    assert not batch["mask"].all()
    embedder = model.model.embedder
    with torch.no_grad():
        events = embedder(batch)  # (B, T, D)
        expected = embedder.items(batch["items"]) + embedder.features["category"](batch["category"])
    assert torch.equal(events, expected)
    assert (events[~batch["mask"]] == 0).all()  # PAD row 0 of every table is exactly 0
    assert (events[batch["mask"]] != 0).any()


def test_pad_is_never_ranked():
    model = make_model()
    batch = eval_batch([[1, 2, 3], [4, 5, 6, 7]], [0, 1])
    with torch.no_grad():
        scores = model.ranking_scores(batch)
    assert torch.isneginf(scores[:, 0]).all()
    assert torch.isfinite(scores[:, 1:]).all()


@pytest.mark.parametrize("kind", ENCODERS)
def test_a_diverged_model_scores_nothing_and_hits_nothing(kind):
    """NaN weights (a diverged run): every score ranks as -inf, so validation reads 0, not a
    perfect or infinite NDCG that would make the diverged epoch the best checkpoint."""
    model = make_model(kind)
    with torch.no_grad():
        model.model.item_table.fill_(float("nan"))
    batch = eval_batch([[1, 2, 3, 4], [5, 6, 7, 8, 9]], [0, 1])
    with torch.no_grad():
        assert torch.isneginf(model.ranking_scores(batch)).all()
        model.validation_step(batch, 0)
        served = model.serve(batch, 3, exclude_history=False)
    values = model.val_metrics.compute()
    assert all(float(v) == 0.0 for v in values.values())
    assert torch.isneginf(served["scores"]).all()


def test_history_exclusion_scores_history_minus_infinity():
    model = make_model(exclude_history=True)
    assert model.exclude_history
    batch = eval_batch([[1, 2, 3, 4], [5, 6, 7, 8]], [0, 1])
    with torch.no_grad():
        scores = model.ranking_scores(batch)
    assert torch.isneginf(scores.gather(1, batch["items"])).all()
    assert torch.isfinite(scores[:, 9:]).all()


def test_popularity_ranks_by_training_counts():
    data = sequences([[1, 2, 2, 3, 3], [2, 1, 4, 4]], num_items=4)
    counts = data.item_counts
    assert counts.tolist() == [0, 2, 3, 0, 0]  # training events: [1, 2, 2] and [2, 1]
    baseline = PopularityRecommender(counts)
    batch = eval_batch([[1, 2, 2, 3, 3], [2, 1, 4, 4]], [0, 1])
    assert baseline.ranking_scores(batch)[0].argmax().item() == 2


@pytest.mark.parametrize(("std", "expected"), [(None, 32**-0.5), (0.02, 0.02)])
def test_embedding_std_sets_every_tables_start_and_pad_stays_zero(std, expected):
    spec = model_spec(
        {
            "name": "m",
            "encoder": {"name": "gru"},
            "num_items": 5000,
            "embedding_dim": 32,
            "embedding_std": std,
            "side_features": {"category": 3000},
        }
    )
    embedder = build_model(spec).model.embedder
    for table in (embedder.items, embedder.features["category"]):
        assert (table.weight[0] == 0).all()
        assert table.weight[1:].std().item() == pytest.approx(expected, rel=0.03)


def test_a_spec_without_embedding_std_keeps_the_unit_norm_default():
    """Checkpoints written before the option rebuild the model they were trained as."""
    spec = model_spec({"name": "m", "encoder": {"name": "gru"}, "num_items": 3})
    assert spec.embedding_std is None


@pytest.mark.parametrize("encoder", ["self_attention", "frequency_attention"])
def test_layer_std_redraws_every_linear_and_position_table_and_zeros_biases(encoder):
    def network(layer_std):
        torch.manual_seed(0)
        spec = model_spec(
            {
                "name": "m",
                "encoder": {"name": encoder, "max_len": 200, "num_layers": 2},
                "num_items": 10,
                "embedding_dim": 64,
                "layer_std": layer_std,
            }
        )
        return build_model(spec).model

    small, default = network(0.02), network(None)
    linears = [m for m in small.encoder.modules() if isinstance(m, torch.nn.Linear)]
    assert linears
    for layer in linears:
        assert layer.weight.std().item() == pytest.approx(0.02, rel=0.1)
        assert layer.bias is None or (layer.bias == 0).all()
    assert small.encoder.positions.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert default.encoder.positions.weight.std().item() == pytest.approx(64**-0.5, rel=0.05)
    # the item table and the layer norms keep their own starts
    assert small.embedder.items.weight[1:].std().item() == pytest.approx(64**-0.5, rel=0.1)
    for norm in (m for m in small.encoder.modules() if isinstance(m, torch.nn.LayerNorm)):
        assert (norm.weight == 1).all() and (norm.bias == 0).all()
