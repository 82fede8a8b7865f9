"""Fixed negative candidates for sampled-candidate evaluation (as in the SASRec and DIN papers).

Sampled metrics rank the held-out item among itself and ``n`` sampled negatives instead of all
items. They are a different quantity from all-item metrics (never compare the two) and are
reported under their own keys (``test/sampled100/ndcg@10``). The negatives depend only on the
data and the seed, so every model is evaluated against the same candidates.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

Distribution = Literal["uniform", "popularity"]
"""How negatives are drawn: uniformly over the items, or by training popularity."""
DISTRIBUTIONS = get_args(Distribution)


def sample_negatives(
    history_keys: np.ndarray,
    users: np.ndarray,
    num_items: int,
    n: int,
    seed: int,
    item_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Draw ``n`` negatives per user, none of them in that user's history.

    Draws are with replacement (like the papers' protocols); items the user ever interacted with
    are rejected and redrawn, vectorised over users.

    Args:
        history_keys: sorted unique ``user * (num_items + 1) + item`` of every user's events.
        users: ``(U,)`` user indices to draw for.
        num_items: N; candidates are items 1..N.
        n: negatives per user.
        seed: fixes the draw.
        item_weights: ``(N + 1,)`` sampling weights (popularity); None is uniform.

    Returns:
        ``(U, n)`` int64 item indices.
    """
    rng = np.random.default_rng(seed)
    probs = None
    if item_weights is not None:
        probs = np.asarray(item_weights[1:], dtype=np.float64)
        probs = probs / probs.sum()
    out = np.zeros((len(users), n), dtype=np.int64)
    pending = np.arange(len(users))
    for _ in range(100):
        if pending.size == 0:
            return out
        draws = rng.choice(num_items, size=(pending.size, 2 * n), p=probs) + 1  # (P, 2n)
        keys = users[pending, None] * (num_items + 1) + draws
        seen = np.isin(keys, history_keys)
        first_valid = np.argsort(seen, axis=1, kind="stable")[:, :n]  # valid draws first
        enough = (~seen).sum(axis=1) >= n
        rows = pending[enough]
        out[rows] = np.take_along_axis(draws[enough], first_valid[enough], axis=1)
        pending = pending[~enough]
    raise ValueError(
        f"could not draw {n} negatives outside the history of {pending.size} user(s) "
        f"(e.g. user {users[pending[0]]}); lower the number of sampled negatives"
    )
