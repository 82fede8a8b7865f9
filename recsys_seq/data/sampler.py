"""Length-bucketed batches with an optional token budget, sharded across DDP ranks.

With ``group_by_length=False`` steps 1 and 2 are skipped: batches are plain random draws,
each padded to its own longest window (more padding, but batch mates of every length, as the
reference code of the S3-Rec line trains).

How an epoch's batches are built (identically on every rank, from ``seed`` and ``epoch``):

1. Each sample goes to the bucket whose ``(lower, upper]`` length range holds it.
2. Within a bucket the samples are shuffled, then sorted by length inside windows of
   ``sort_window`` batches, so batch mates have almost equal lengths but differ every epoch.
3. A bucket is cut into batches of ``batch_size`` samples, or, with ``max_tokens``, of
   ``max_tokens // longest_in_bucket`` samples, so ``longest_in_batch * batch_size`` never
   exceeds the budget (a single window longer than the budget forms a batch on its own).
4. The batch order is shuffled across buckets.
5. Sharding: rank r takes batches ``r, r + W, r + 2W, ...``. Every training rank must run
   the same number of steps (unequal counts hang DDP training), so when the batch count is
   not a multiple of W the largest batch is split in two, up to W - 1 times. Every sample is
   then used exactly once per epoch and the ranks' batches stay disjoint. Only with fewer
   samples than the rounded-up batch count (a toy dataset) does that fail: training then
   repeats its first batches (``allow_repeats``).
   Evaluation synchronises once, when its metrics are computed, so its ranks may run one
   batch apart: its batches are split only while there are fewer than W (a rank without a
   batch would skip that reduction). Every user is then scored in the very batch one process
   gives it (the same batch mates, the same padding), so evaluation under DDP computes the
   same numbers as one process, not merely the same sums; it never repeats a user, and with
   fewer users than W leaves the last ranks without a batch (which the data module refuses:
   Lightning skips evaluation on such a rank, and the others would wait for it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler

from recsys_seq.core.heap import release_freed_memory


def geometric_boundaries(max_len: int, ratio: float = 1.1) -> list[int]:
    """Bucket upper bounds 1, 2, ..., growing by ``ratio``, ending at ``max_len``.

    Within a bucket the longest window is at most ``ratio`` times the shortest, which bounds
    padding waste before the in-bucket sort reduces it further.
    """
    bounds, upper = [], 1.0
    while upper < max_len:
        bounds.append(int(upper))
        upper = max(upper * ratio, upper + 1)
    return sorted(set(bounds) | {max_len})


class BucketBatchSampler(Sampler[list[int]]):
    """Yields lists of sample indices, grouped by length; see the module docstring.

    Args:
        lengths: ``(n,)`` window length of each sample.
        batch_size: samples per batch (ignored when ``max_tokens`` is set).
        max_tokens: token budget per batch, ``longest_in_batch * batch_size <= max_tokens``.
        boundaries: ascending bucket upper bounds; lengths above the last bound share a
            final bucket. Defaults to :func:`geometric_boundaries` over the longest length.
        shuffle: shuffle samples and batch order (training); otherwise a fixed order.
        seed: base seed; the order depends only on ``(seed, epoch)``.
        num_replicas: world size W.
        rank: this process's rank.
        allow_repeats: training: every rank runs the same steps, repeating batches when
            splitting cannot even them out; False (evaluation): every user exactly once, in
            the batches one process gives (step 5 of the module docstring).
        sort_window: in-bucket sorting window, in batches.
        group_by_length: batch mates of almost equal length (steps 1 and 2 of the module
            docstring); False draws every batch at random from all samples.
    """

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        batch_size: int | None = 128,
        max_tokens: int | None = None,
        boundaries: Sequence[int] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        allow_repeats: bool = True,
        sort_window: int = 32,
        group_by_length: bool = True,
    ) -> None:
        self.lengths = np.asarray(lengths)  # the dataset's own array, not a per-rank copy
        if not np.issubdtype(self.lengths.dtype, np.integer):
            self.lengths = self.lengths.astype(np.int64)
        if max_tokens is None and (batch_size is None or batch_size < 1):
            raise ValueError("set batch_size >= 1 or max_tokens")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is outside world size {num_replicas}")
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        longest = int(self.lengths.max()) if len(self.lengths) else 1
        if not group_by_length:
            boundaries = [longest]  # one bucket
        self.boundaries = np.asarray(
            sorted(boundaries) if boundaries else geometric_boundaries(longest), dtype=np.int64
        )
        self.group_by_length = group_by_length
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.allow_repeats = allow_repeats
        self.sort_window = sort_window
        self.epoch = 0
        self._skip = 0
        self.bucket_of = np.searchsorted(self.boundaries, self.lengths, side="left").astype(
            np.min_scalar_type(len(self.boundaries))  # one byte per window, not eight
        )
        self._bucket_sizes = self._batch_size_per_bucket()

    def set_epoch(self, epoch: int) -> None:
        """Change the shuffle; Lightning calls this at the start of every training epoch."""
        self.epoch = epoch

    def resume(self, epoch: int, batches_done: int) -> None:
        """Continue an interrupted epoch: the next iteration is ``epoch``'s order without its
        first ``batches_done`` batches (this rank's); later iterations are whole again."""
        self.epoch = epoch
        self._skip = batches_done

    def _batch_size_per_bucket(self) -> np.ndarray:
        buckets = len(self.boundaries) + 1
        if self.max_tokens is None:
            return np.full(buckets, self.batch_size, dtype=np.int64)
        longest = np.zeros(buckets, dtype=np.int64)
        np.maximum.at(longest, self.bucket_of, self.lengths)
        return np.maximum(self.max_tokens // np.maximum(longest, 1), 1)

    def _all_batches(self) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, self.epoch])
        noise = rng.random(len(self.lengths)) if self.shuffle else np.zeros(len(self.lengths))
        order = np.lexsort((noise, self.bucket_of))  # by bucket, random inside a bucket
        batches: list[np.ndarray] = []
        bucket_starts = np.searchsorted(self.bucket_of[order], np.arange(len(self._bucket_sizes)))
        for bucket, members in enumerate(np.split(order, bucket_starts[1:])):
            if len(members) == 0:
                continue
            size = int(self._bucket_sizes[bucket])
            if self.group_by_length:
                window = np.arange(len(members)) // (size * self.sort_window)
                members = members[np.lexsort((self.lengths[members], window))]
            batches.extend(np.split(members, np.arange(size, len(members), size)))
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def _even_out(self, batches: list[np.ndarray]) -> list[np.ndarray]:
        """Training: make the batch count a multiple of the world size; evaluation: at least
        the world size (see the module docstring)."""
        batches = list(batches)
        if self.allow_repeats:
            splits = -len(batches) % self.num_replicas
        else:
            splits = max(self.num_replicas - len(batches), 0)
        for _ in range(splits):
            largest = max(range(len(batches)), key=lambda i: len(batches[i]))
            if len(batches[largest]) < 2:  # fewer samples than the rounded-up count
                if not self.allow_repeats:
                    return batches
                short = -len(batches) % self.num_replicas
                return batches + [batches[i % len(batches)] for i in range(short)]
            batches[largest : largest + 1] = np.array_split(batches[largest], 2)
        return batches

    def _shard(self, batches: list[np.ndarray]) -> list[np.ndarray]:
        return self._even_out(batches)[self.rank :: self.num_replicas] if batches else []

    def __iter__(self) -> Iterator[list[int]]:
        skip, self._skip = self._skip, 0
        shard = self._shard(self._all_batches())[skip:]
        release_freed_memory()  # the epoch's shuffle of every rank's windows is freed now
        for batch in shard:
            yield batch.tolist()

    def __len__(self) -> int:
        counts = np.bincount(self.bucket_of, minlength=len(self._bucket_sizes))
        total = int((-(-counts // self._bucket_sizes)).sum())
        if total and self.allow_repeats:  # after _even_out
            total = -(-total // self.num_replicas) * self.num_replicas
        elif total:
            total = min(max(total, self.num_replicas), len(self.lengths))
        return len(range(self.rank, total, self.num_replicas))
