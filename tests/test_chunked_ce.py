"""Chunked cross-entropy: the value and both gradients are the dense path's, for any block
shape, with PAD never a class; bf16 stays finite and close; FullSoftmaxLoss agrees end to end."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from recsys_seq.core.options import OptionError
from recsys_seq.data import IGNORE_INDEX, PaddedBatchCollator, Stage, WindowDataset
from recsys_seq.models import build_model, model_spec
from recsys_seq.models.chunked_ce import chunked_cross_entropy
from recsys_seq.models.full_softmax import ACCELERATOR_BLOCK_LOGITS, FullSoftmaxLoss, block_shape
from recsys_seq.models.scorers import with_pad_at_minimum
from tests.helpers import random_histories, sequences

TOLERANCE = {
    torch.float64: {"rtol": 1e-9, "atol": 1e-12},
    torch.float32: {"rtol": 1e-5, "atol": 1e-6},
}


def dense(hidden, items, targets):
    """Today's path: the whole logits tensor, PAD's column at the minimum."""
    logits = with_pad_at_minimum(hidden @ items.T)  # (M, N + 1)
    return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)


def loss_and_grads(fn, hidden, items, *args):
    hidden = hidden.detach().requires_grad_()
    items = items.detach().requires_grad_()
    loss = fn(hidden, items, *args)
    return (loss, *torch.autograd.grad(loss, (hidden, items)))


def example(rows, num_items, dim, dtype=torch.float64, seed=0, ignored=0.3, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, dim, generator=g, dtype=dtype) * scale
    items = torch.randn(num_items + 1, dim, generator=g, dtype=dtype) * scale
    targets = torch.randint(1, num_items + 1, (rows,), generator=g)
    targets[torch.rand(rows, generator=g) < ignored] = IGNORE_INDEX
    targets[0] = num_items  # the last item is always a target
    return hidden, items, targets


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 40),
    num_items=st.integers(1, 60),
    dim=st.integers(1, 8),
    chunk=st.integers(1, 80),  # divides N or not, 1, and larger than N
    row_chunk=st.one_of(st.none(), st.integers(1, 45)),
    dtype=st.sampled_from([torch.float64, torch.float32]),
    seed=st.integers(0, 2**16),
)
def test_value_and_gradients_are_the_dense_ones(
    rows, num_items, dim, chunk, row_chunk, dtype, seed
):
    hidden, items, targets = example(rows, num_items, dim, dtype, seed)
    expected = loss_and_grads(dense, hidden, items, targets)
    got = loss_and_grads(chunked_cross_entropy, hidden, items, targets, chunk, row_chunk)
    for name, e, g in zip(["loss", "grad_h", "grad_W"], expected, got, strict=True):
        torch.testing.assert_close(g, e, **TOLERANCE[dtype], msg=name)


@pytest.mark.parametrize("chunk, row_chunk", [(1, 1), (3, None), (7, 4), (100, 100)])
def test_rows_that_all_are_ignored_give_zero_loss_and_zero_gradients(chunk, row_chunk):
    hidden, items, _ = example(6, 10, 4)
    targets = torch.full((6,), IGNORE_INDEX)
    loss, grad_h, grad_w = loss_and_grads(
        chunked_cross_entropy, hidden, items, targets, chunk, row_chunk
    )
    assert loss.item() == 0.0
    assert torch.equal(grad_h, torch.zeros_like(grad_h))
    assert torch.equal(grad_w, torch.zeros_like(grad_w))


def test_ignored_rows_do_not_change_the_loss_or_get_gradient():
    hidden, items, targets = example(12, 9, 4, ignored=0.5)
    ignored = targets == IGNORE_INDEX
    assert ignored.any()
    loss, grad_h, _ = loss_and_grads(chunked_cross_entropy, hidden, items, targets, 4, 5)
    garbage = hidden.clone()
    garbage[ignored] = 30.0
    again, _, _ = loss_and_grads(chunked_cross_entropy, garbage, items, targets, 4, 5)
    torch.testing.assert_close(again, loss)
    assert torch.equal(grad_h[ignored], torch.zeros_like(grad_h[ignored]))


def test_pad_takes_no_probability_and_no_gradient():
    """A PAD row that would win every softmax if it were a class changes nothing."""
    hidden, items, targets = example(10, 8, 4)
    loud = items.clone()
    loud[0] = 50 * hidden.mean(0)  # a huge logit for every row, were PAD scored
    loss, grad_h, grad_w = loss_and_grads(chunked_cross_entropy, hidden, loud, targets, 3, 4)
    real = targets != IGNORE_INDEX
    without_pad = F.cross_entropy(hidden[real] @ items[1:].T, targets[real] - 1)
    torch.testing.assert_close(loss, without_pad, **TOLERANCE[torch.float64])
    assert torch.equal(grad_w[0], torch.zeros_like(grad_w[0]))
    same = loss_and_grads(chunked_cross_entropy, hidden, items, targets, 3, 4)
    torch.testing.assert_close(grad_h, same[1], **TOLERANCE[torch.float64])


@pytest.mark.parametrize("scale", [30.0, 100.0])
def test_extreme_logits_do_not_overflow(scale):
    """Logits in the thousands (float32 exp overflows past ~88): finite, and the float64
    answer."""
    hidden, items, targets = example(16, 50, 8, torch.float32, scale=scale)
    assert (hidden @ items.T).abs().max() > 1000
    loss, grad_h, grad_w = loss_and_grads(chunked_cross_entropy, hidden, items, targets, 7, 5)
    assert all(torch.isfinite(t).all() for t in (loss, grad_h, grad_w))
    exact = loss_and_grads(chunked_cross_entropy, hidden.double(), items.double(), targets, 7, 5)
    reference = loss_and_grads(dense, hidden.double(), items.double(), targets)
    torch.testing.assert_close(exact[0], reference[0], **TOLERANCE[torch.float64])
    torch.testing.assert_close(loss.double(), exact[0], rtol=1e-5, atol=1e-3)


def test_bf16_autocast_is_close_to_float32_and_accumulates_in_float32():
    hidden, items, targets = example(64, 300, 16, torch.float32)
    reference = loss_and_grads(chunked_cross_entropy, hidden, items, targets, 64, 16)

    def under_autocast(h, w, t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return chunked_cross_entropy(h, w, t, 64, 16)

    got = loss_and_grads(under_autocast, hidden, items, targets)
    assert got[0].dtype == torch.float32 and got[2].dtype == torch.float32
    for name, r, g in zip(["loss", "grad_h", "grad_W"], reference, got, strict=True):
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g, r, rtol=3e-2, atol=3e-2 * r.abs().max().item(), msg=name)
    assert torch.equal(got[2][0], torch.zeros_like(got[2][0]))


def test_bf16_inputs_without_autocast_give_a_float32_loss():
    hidden, items, targets = example(20, 40, 8, torch.float32)
    loss = chunked_cross_entropy(hidden.bfloat16(), items.bfloat16(), targets, 9)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, dense(hidden, items, targets), rtol=2e-2, atol=0)


@pytest.mark.parametrize(
    "args, fragment",
    [
        ((0, None), "chunk_size and row_chunk_size must be >= 1"),
        ((4, 0), "chunk_size and row_chunk_size must be >= 1"),
    ],
)
def test_block_sizes_below_one_are_refused(args, fragment):
    hidden, items, targets = example(4, 5, 2)
    with pytest.raises(ValueError, match=fragment):
        chunked_cross_entropy(hidden, items, targets, *args)


def test_mismatched_shapes_are_refused():
    hidden, items, targets = example(4, 5, 2)
    with pytest.raises(ValueError, match="targets must be"):
        chunked_cross_entropy(hidden, items, targets[:3], 2)
    with pytest.raises(ValueError, match="hidden must be"):
        chunked_cross_entropy(hidden[:, :1], items, targets, 2)


def test_full_softmax_loss_chunked_equals_dense_on_a_model():
    """The configured loss on a real encoder: same loss, same gradient for every parameter
    (item table, encoder, and through the encoder, the embeddings' inputs)."""
    torch.manual_seed(0)
    spec = model_spec(
        {
            "name": "sasrec",
            "encoder": {"name": "self_attention", "max_len": 8, "num_layers": 1, "num_heads": 2},
            "num_items": 23,
            "embedding_dim": 8,
            "loss": {"name": "full_softmax", "chunk_size": 5, "row_chunk_size": 7},
        }
    )
    task = build_model(spec).train()
    assert (task.loss.chunk_size, task.loss.row_chunk_size) == (5, 7)
    dataset = WindowDataset(sequences(random_histories(6, 23, 8), 23), Stage.TRAIN, 8)
    batch = PaddedBatchCollator()(dataset.__getitems__(list(range(len(dataset)))))
    assert (batch["targets"] == IGNORE_INDEX).any()  # short histories are padded
    results = []
    for loss in (task.loss, FullSoftmaxLoss(chunk_size=None)):
        task.zero_grad(set_to_none=True)
        torch.manual_seed(1)  # the same dropout masks
        value = loss(task.model.encode(batch), batch, task.model)
        value.backward()
        results.append((value.detach(), {n: p.grad.clone() for n, p in task.named_parameters()}))
    (chunked, chunked_grads), (plain, plain_grads) = results
    torch.testing.assert_close(chunked, plain, rtol=1e-5, atol=1e-6)
    assert chunked_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    ("device", "num_items", "rows", "expected"),
    [
        ("cpu", 12_101, 16_384, (1024, 1024)),  # cache-sized blocks on CPU
        ("cpu", 12_101, 300, (1024, 300)),  # never more rows than the step has
        ("cuda", 12_101, 16_384, (12_101, 16_384)),  # one block: a Beauty step on a GPU
        ("cuda", 1_000_000, 16_384, (1_000_000, ACCELERATOR_BLOCK_LOGITS // 1_000_000)),
        ("cuda", 2 * ACCELERATOR_BLOCK_LOGITS, 8, (ACCELERATOR_BLOCK_LOGITS, 1)),
    ],
)
def test_auto_blocks_follow_the_device(device, num_items, rows, expected):
    """``auto`` is cache-sized on CPU and as large as the logits budget allows on a GPU, so a
    GPU step is a few large products instead of hundreds of small launches; the budget bounds
    a block at any catalogue size."""
    items, row_block = block_shape(torch.device(device), num_items, rows, "auto", "auto")
    assert (items, row_block) == expected
    assert items * row_block <= max(ACCELERATOR_BLOCK_LOGITS, 1024 * 1024)


def test_explicit_blocks_are_kept_on_every_device():
    for device in ("cpu", "cuda"):
        assert block_shape(torch.device(device), 500, 64, 16, 8) == (16, 8)
        assert block_shape(torch.device(device), 500, 64, 16, None) == (16, 64)


def test_full_softmax_loss_defaults_to_auto_blocks_and_equals_dense():
    """The default (``auto``) loss on CPU is the chunked one and equals the dense loss."""
    torch.manual_seed(0)
    task = build_model(
        model_spec(
            {
                "name": "sasrec",
                "encoder": {"name": "self_attention", "max_len": 8, "num_layers": 1},
                "num_items": 2500,  # more than one 1024-item block
                "embedding_dim": 8,
                "loss": {"name": "full_softmax"},
            }
        )
    ).eval()
    assert (task.loss.chunk_size, task.loss.row_chunk_size) == ("auto", "auto")
    dataset = WindowDataset(sequences(random_histories(6, 2500, 8), 2500), Stage.TRAIN, 8)
    batch = PaddedBatchCollator()(dataset.__getitems__(list(range(len(dataset)))))
    states = task.model.encode(batch)
    chunked = task.loss(states, batch, task.model)
    dense = FullSoftmaxLoss(chunk_size=None)(states, batch, task.model)
    torch.testing.assert_close(chunked, dense, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("key", ["chunk_size", "row_chunk_size"])
@pytest.mark.parametrize("value", ["Auto", "fast", -1, True, 2.5, [1024]])
def test_a_wrong_block_size_is_refused_naming_the_option(key, value):
    spec = {
        "name": "sasrec",
        "encoder": {"name": "self_attention", "max_len": 8},
        "num_items": 10,
        "loss": {"name": "full_softmax", key: value},
    }
    with pytest.raises(OptionError, match=f"model.loss.{key} must be"):
        model_spec(spec)
