"""Cross-entropy over the whole catalogue without the ``(M, N + 1)`` logits tensor.

The full softmax scores every state against every item: ``logits = hidden @ items.T``. At a
real batch (``M = B * T = 6400`` positions) and a million items that tensor alone is 25.6 GB
in float32, and even at 54k items its forward and backward copies dominate the step. Here the
items are visited ``chunk_size`` at a time (and the rows ``row_chunk_size`` at a time), with an
online log-sum-exp: each block's ``logsumexp`` is folded into the running one with
``logaddexp`` (the running max and running sum, kept as one number per row). Nothing larger
than one ``(rows, chunk)`` block of logits is ever held.

The backward pass recomputes each block from the saved log-sum-exp instead of storing the
softmax, and builds both gradients block by block::

    g       = (softmax - onehot(target)) / count      (rows, chunk), one block at a time
    grad_h  = g @ items                               (M, D)
    grad_W  = g.T @ hidden                            (N + 1, D)

The ``onehot`` part is one gather and one ``index_add`` outside the loop, so no block needs a
data-dependent scatter.

PAD (item 0) is not a class: the blocks cover items ``1..N`` only, so PAD takes exactly zero
probability and its row of ``grad_W`` stays exactly zero. (The dense path sets PAD's logit to
the dtype's minimum, which gives it ``exp(min - max)``: zero within float error.)

Precision: under autocast (bf16 or fp16) the matrix products run in the autocast dtype, as
the dense path's would, while the log-sum-exp, the softmax and the gradient sums accumulate in
float32 and the loss is float32. Float64 inputs stay float64 throughout (exactness tests).
"""

from __future__ import annotations

import torch

from recsys_seq.data.batch import IGNORE_INDEX


def chunked_cross_entropy(
    hidden: torch.Tensor,
    items: torch.Tensor,
    targets: torch.Tensor,
    chunk_size: int,
    row_chunk_size: int | None = None,
) -> torch.Tensor:
    """Mean cross-entropy of ``hidden @ items[1:].T`` over the rows whose target is not
    :data:`~recsys_seq.data.batch.IGNORE_INDEX`; 0 (and zero gradients) when every row is.

    Args:
        hidden: ``(M, D)`` states, one per scored position.
        items: ``(N + 1, D)`` the item table; row 0 is PAD and never a class.
        targets: ``(M,)`` the next item, ``1..N``, or ``IGNORE_INDEX`` for a position that
            does not count.
        chunk_size: items per block (>= 1).
        row_chunk_size: rows per block; None: all ``M`` rows in each block.

    Returns:
        A scalar, float32 (float64 for float64 inputs).
    """
    if chunk_size < 1 or (row_chunk_size is not None and row_chunk_size < 1):
        raise ValueError(
            f"chunk_size and row_chunk_size must be >= 1, got {chunk_size}, {row_chunk_size}"
        )
    if hidden.dim() != 2 or items.dim() != 2 or hidden.shape[1] != items.shape[1]:
        raise ValueError(
            f"hidden must be (M, D) and items (N + 1, D), got {tuple(hidden.shape)} "
            f"and {tuple(items.shape)}"
        )
    if targets.shape != hidden.shape[:1]:
        raise ValueError(f"targets must be ({hidden.shape[0]},), got {tuple(targets.shape)}")
    device = hidden.device.type
    if torch.is_autocast_enabled(device):  # the products run as autocast would run them
        dtype = torch.get_autocast_dtype(device)
        hidden, items = hidden.to(dtype), items.to(dtype)
    elif hidden.dtype != items.dtype:
        dtype = torch.promote_types(hidden.dtype, items.dtype)
        hidden, items = hidden.to(dtype), items.to(dtype)
    with torch.autocast(device, enabled=False):
        return _ChunkedCrossEntropy.apply(
            hidden, items, targets, chunk_size, row_chunk_size or hidden.shape[0]
        )


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float32 and narrower floats, float64 for float64."""
    return torch.promote_types(dtype, torch.float32)


def _blocks(rows: int, num_items: int, row_chunk: int, chunk: int):
    """``(row slice, item slice)`` blocks covering rows ``0..rows-1`` and items ``1..N``,
    rows outer (a row block's running log-sum-exp and ``grad_h`` stay hot)."""
    for r in range(0, rows, row_chunk):
        for c in range(1, num_items + 1, chunk):
            yield slice(r, min(r + row_chunk, rows)), slice(c, min(c + chunk, num_items + 1))


def _add_product(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``out += a @ b`` in place; ``out`` (float32) may be wider than ``a`` and ``b``."""
    if a.dtype == out.dtype:
        out.addmm_(a, b)
    else:
        out += (a @ b).to(out.dtype)


class _ChunkedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, items, targets, chunk_size, row_chunk_size):
        acc = _accumulation_dtype(hidden.dtype)
        valid = targets != IGNORE_INDEX  # (M,)
        safe = torch.where(valid, targets, 0)  # ignored rows point at PAD, weighted out
        count = valid.sum().clamp(min=1).to(acc)  # a tensor: no host-device sync
        lse = torch.full((hidden.shape[0],), -torch.inf, dtype=acc, device=hidden.device)
        for rows, cols in _blocks(hidden.shape[0], items.shape[0] - 1, row_chunk_size, chunk_size):
            logits = (hidden[rows] @ items[cols].T).to(acc)  # (rows, chunk)
            top = logits.amax(dim=1)  # (rows,) in place below: one block in memory
            block = logits.sub_(top[:, None]).exp_().sum(dim=1).log_().add_(top)
            lse[rows] = torch.logaddexp(lse[rows], block)
        target_logit = (hidden.to(acc) * items[safe].to(acc)).sum(-1)  # (M,)
        per_row = torch.where(valid, lse - target_logit, 0)
        ctx.save_for_backward(hidden, items, safe, valid, lse, count)
        ctx.blocks = (chunk_size, row_chunk_size)
        return per_row.sum() / count

    @staticmethod
    def backward(ctx, grad_loss):
        hidden, items, safe, valid, lse, count = ctx.saved_tensors
        chunk_size, row_chunk_size = ctx.blocks
        want_h, want_w = ctx.needs_input_grad[:2]
        acc = lse.dtype
        scale = torch.where(valid, grad_loss.to(acc) / count, 0)  # (M,) d loss / d logit row
        grad_h = torch.zeros(hidden.shape, dtype=acc, device=hidden.device) if want_h else None
        grad_w = torch.zeros(items.shape, dtype=acc, device=items.device) if want_w else None
        with torch.autocast(hidden.device.type, enabled=False):
            for rows, cols in _blocks(
                hidden.shape[0], items.shape[0] - 1, row_chunk_size, chunk_size
            ):
                logits = (hidden[rows] @ items[cols].T).to(acc)  # (rows, chunk), recomputed
                g = logits.sub_(lse[rows, None]).exp_().mul_(scale[rows, None])  # softmax part
                g = g.to(hidden.dtype)
                if want_h:
                    _add_product(grad_h[rows], g, items[cols])  # (rows, D)
                if want_w:
                    _add_product(grad_w[cols], g.T, hidden[rows])  # (chunk, D)
            if want_h:  # the onehot part: minus the target's vector
                grad_h -= scale[:, None] * items[safe].to(acc)
            if want_w:
                grad_w.index_add_(0, safe, -scale[:, None] * hidden.to(acc))  # PAD gets +0
        return (
            grad_h.to(hidden.dtype) if want_h else None,
            grad_w.to(items.dtype) if want_w else None,
            None,
            None,
            None,
        )
