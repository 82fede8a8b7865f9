"""Deterministic synthetic click log with real sequential structure: the bundled demo dataset.

Run ``python -m data_prep.synthetic`` to (re)generate ``data_prep/bundled/clicks.csv.gz``; the
output is byte-identical for the same parameters and numpy version.

How a user's sequence is generated (all users advance together, one vectorised step per event):

* Items live in categories; categories sit on a ring (category ``c`` neighbours ``c +- 1``).
* Every item has a few *successors* (a sparse transition graph, mostly inside its category,
  sometimes into a neighbouring one) with decreasing weights.
* At each step the user, with probability ``p_successor``, moves to a successor of the current
  item (the user's category follows it); with probability ``p_repeat`` re-clicks a recent item;
  otherwise, possibly after drifting to a neighbouring category (``p_drift``), the user clicks a
  popularity-weighted item of the current category.

Popularity alone therefore predicts little (many categories, flat-ish popularity within each),
while the last item (and the current category) predicts a lot: a sequence model learns the
transition graph, a popularity ranking cannot.

The file looks like a real log: non-contiguous hashed-looking ids, unix-second timestamps with
some exact ties within a user, string event types and categories, and rows only roughly in time
order (a few minutes of jitter), so readers and the prep job must sort.
"""

from __future__ import annotations

import argparse
import gzip
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BUNDLED_DIR = Path(__file__).with_name("bundled")
BUNDLED_CLICKS = BUNDLED_DIR / "clicks.csv.gz"

EVENT_TYPES = ("view", "cart", "purchase")


@dataclass(frozen=True)
class SyntheticConfig:
    """Parameters of the generator; the defaults make the bundled dataset."""

    seed: int = 20240611
    n_users: int = 3000
    n_items: int = 2000
    n_categories: int = 40
    min_len: int = 5
    max_len: int = 200
    length_shape: float = 1.5  # Lomax (Pareto II) tail index of user lengths: smaller = heavier
    length_scale: float = 15.0  # mean extra length ~ scale / (shape - 1) before clipping
    item_zipf: float = 0.9  # popularity exponent of items within their category
    n_successors: int = 3  # out-degree of the transition graph
    p_successor_in_category: float = 0.85  # else the successor is in a neighbouring category
    p_successor: float = 0.55  # next item follows the transition graph
    p_repeat: float = 0.03  # next item re-clicks one of the last few items
    p_drift: float = 0.15  # on a popularity step, move to a neighbouring category first
    p_tie: float = 0.03  # zero time gap (exact timestamp tie with the previous event)
    mean_gap_s: float = 900.0
    start: int = 1_700_000_000  # unix seconds
    span_days: int = 60
    jitter_s: int = 300  # row-order noise: rows are written sorted by (timestamp + jitter)


def _lengths(cfg: SyntheticConfig, rng: np.random.Generator) -> np.ndarray:
    extra = rng.pareto(cfg.length_shape, cfg.n_users) * cfg.length_scale
    return np.clip(cfg.min_len + np.floor(extra), cfg.min_len, cfg.max_len).astype(np.int64)


def generate(cfg: SyntheticConfig = SyntheticConfig()) -> dict[str, np.ndarray]:
    """Generate the raw log as columns (unsorted-ish rows, original ids).

    Returns:
        ``user_id``, ``item_id`` (int64, non-contiguous), ``timestamp`` (int64 unix seconds),
        ``event_type`` (str), ``category`` (str) arrays of equal length.
    """
    rng = np.random.default_rng(cfg.seed)
    n_items, n_cats = cfg.n_items, cfg.n_categories

    # Items -> categories (uneven sizes), items sorted by category for range sampling.
    cat_weights = rng.dirichlet(np.full(n_cats, 4.0))
    item_cat = np.sort(rng.choice(n_cats, size=n_items, p=cat_weights))
    cat_start = np.searchsorted(item_cat, np.arange(n_cats))
    cat_end = np.searchsorted(item_cat, np.arange(n_cats), side="right")
    cat_size = cat_end - cat_start
    assert (cat_size > cfg.n_successors).all(), "every category needs a few items"

    # Popularity within a category: Zipf over a random rank.
    rank_in_cat = np.empty(n_items, dtype=np.int64)
    for c in range(n_cats):  # 40 categories, not rows
        rank_in_cat[cat_start[c] : cat_end[c]] = rng.permutation(cat_size[c]) + 1
    pop = rank_in_cat.astype(np.float64) ** -cfg.item_zipf
    # cumulative popularity shifted by category: item i of category c covers (c+F(i-1), c+F(i)]
    pop_norm = pop / np.bincount(item_cat, weights=pop)[item_cat]
    cum = np.cumsum(pop_norm)
    cum_in_cat = cum - np.concatenate([[0.0], cum[cat_end[:-1] - 1]])[item_cat]
    cum_global = item_cat + np.minimum(cum_in_cat, 1.0)

    def sample_in_category(cats: np.ndarray) -> np.ndarray:
        u = cats + rng.random(cats.size)
        return np.minimum(np.searchsorted(cum_global, u, side="left"), cat_end[cats] - 1)

    # Sparse transition graph: successors uniform (not popularity weighted) in the category.
    k = cfg.n_successors
    succ_cat = np.repeat(item_cat[:, None], k, axis=1)
    move = rng.random((n_items, k)) > cfg.p_successor_in_category
    succ_cat = np.where(move, (succ_cat + rng.choice([-1, 1], (n_items, k))) % n_cats, succ_cat)
    succ = cat_start[succ_cat] + np.floor(rng.random((n_items, k)) * cat_size[succ_cat]).astype(
        np.int64
    )
    succ_w = np.array([0.6, 0.3, 0.1][:k]) if k <= 3 else np.full(k, 1.0 / k)
    succ_w = succ_w / succ_w.sum()

    lengths = _lengths(cfg, rng)
    n_users, max_len = cfg.n_users, int(lengths.max())
    seq = np.zeros((n_users, max_len), dtype=np.int64)
    cur_cat = rng.choice(n_cats, size=n_users, p=cat_weights)
    seq[:, 0] = sample_in_category(cur_cat)
    for t in range(1, max_len):  # steps, each vectorised over all users
        prev = seq[:, t - 1]
        r = rng.random(n_users)
        # successor step
        pick = rng.choice(k, size=n_users, p=succ_w)
        nxt_succ = succ[prev, pick]
        # repeat step: one of the last (up to) 5 items
        back = np.minimum(rng.integers(1, 6, n_users), t)
        nxt_rep = seq[np.arange(n_users), t - back]
        # popularity step inside (possibly drifted) category
        drift = rng.random(n_users) < cfg.p_drift
        drift_cat = np.where(drift, (cur_cat + rng.choice([-1, 1], n_users)) % n_cats, cur_cat)
        nxt_pop = sample_in_category(drift_cat)
        is_succ = r < cfg.p_successor
        is_rep = (~is_succ) & (r < cfg.p_successor + cfg.p_repeat)
        nxt = np.where(is_succ, nxt_succ, np.where(is_rep, nxt_rep, nxt_pop))
        seq[:, t] = nxt
        cur_cat = item_cat[nxt]

    mask = np.arange(max_len)[None, :] < lengths[:, None]
    user_idx = np.repeat(np.arange(n_users), lengths)
    item_idx = seq[mask]

    # Timestamps: a start per user, exponential gaps, some exact ties.
    gaps = np.ceil(rng.exponential(cfg.mean_gap_s, (n_users, max_len))).astype(np.int64)
    gaps[rng.random((n_users, max_len)) < cfg.p_tie] = 0
    gaps[:, 0] = 0
    start = cfg.start + rng.integers(0, cfg.span_days * 86400, n_users)
    ts = (start[:, None] + np.cumsum(gaps, axis=1))[mask]

    # Event types: mostly views; purchases a bit more likely for popular items.
    ev_r = rng.random(item_idx.size)
    event = np.where(ev_r < 0.85, 0, np.where(ev_r < 0.96, 1, 2))

    # Original ids: hashed-looking, non-contiguous, unique.
    user_ids = np.sort(10_000_000 + rng.choice(90_000_000, n_users, replace=False))
    user_ids = rng.permutation(user_ids)
    item_ids = 100_000_000 + rng.choice(900_000_000, n_items, replace=False)
    cat_names = np.array([f"c{c:02d}" for c in rng.permutation(n_cats)])

    # Row order: roughly by time, as a log would be, with jitter (within-user order is not
    # guaranteed in the file, ties keep generation order thanks to the stable sort).
    order = np.argsort(ts + rng.integers(0, cfg.jitter_s, ts.size), kind="stable")
    return {
        "user_id": user_ids[user_idx][order],
        "item_id": item_ids[item_idx][order],
        "timestamp": ts[order],
        "event_type": np.array(EVENT_TYPES)[event][order],
        "category": cat_names[item_cat[item_idx]][order],
    }


def write_csv_gz(columns: dict[str, np.ndarray], path: Path) -> Path:
    """Write columns as a gzip CSV with a header, deterministically (gzip mtime 0)."""
    names = list(columns)
    buf = io.StringIO()
    buf.write(",".join(names) + "\n")
    text = columns[names[0]].astype(str)
    for name in names[1:]:
        text = np.char.add(np.char.add(text, ","), columns[name].astype(str))
    buf.write("\n".join(text.tolist()))
    buf.write("\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    with (
        open(path, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz,
    ):
        gz.write(buf.getvalue().encode())
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=BUNDLED_CLICKS)
    parser.add_argument("--seed", type=int, default=SyntheticConfig.seed)
    parser.add_argument("--users", type=int, default=SyntheticConfig.n_users)
    args = parser.parse_args(argv)
    cfg = SyntheticConfig(seed=args.seed, n_users=args.users)
    cols = generate(cfg)
    write_csv_gz(cols, args.output)
    print(f"wrote {len(cols['user_id']):,} events to {args.output}")


if __name__ == "__main__":
    main()
