"""Prepared sequences held as flat arrays, and per-stage views of input windows over them.

The whole dataset lives in one flat item array plus per-user offsets (the jagged layout), so a
batch is gathered with a handful of vectorised index operations, never a loop over users.
A *window* is the slice of a user's history a model reads for one stage:

* train: ``items[:val_index]`` cut from its end into consecutive windows of ``max_len``
  targets (``train_windows="all"``; the first may be shorter), or only the last of them
  (``"last"``); inputs are a window's events, targets the same slice shifted by one
  (next-item prediction at every position). Every training event is a target exactly once.
  With ``train_holdout=h`` the last h training events are no one's target here; with
  ``train_windows="holdout"`` they are the only targets, one window each (input
  ``items[:p][-max_len:]``, ``target`` ``items[p]``, as in validation). With
  ``train_windows="prefixes"`` every training event is the target of its own window, the
  ``max_len`` events before it (every cut of the history, one sample each): training then sees
  exactly the shape evaluation reads, the target right after the window's last event. With
  ``empty_history`` the first training event is a target too, of an empty window: one PAD slot
  (item 0, features 0) stands in for the history that does not exist, so the model learns what
  a user starts with (the S3-Rec line's code trains these: a seventh of S3-Rec Beauty's samples).
* val: input ``items[:val_index][-max_len:]``, target ``items[val_index]``.
* test: input ``items[:test_index][-max_len:]``, target ``items[test_index]``.
* serve: input the whole known history's last ``max_len`` events, no target; the batch also
  holds ``seen``, every item of the whole history (what serving excludes).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from data_prep import schema, steps
from recsys_seq.core.heap import release_freed_memory
from recsys_seq.data.batch import JaggedWindows
from recsys_seq.data.catalogue import Catalogue
from recsys_seq.data.negatives import DISTRIBUTIONS, sample_negatives
from recsys_seq.data.validate import check_prepared

TRAIN_WINDOWS = ("all", "last", "prefixes", "holdout")
SINGLE_TARGET = ("prefixes", "holdout")  # training windows with one target each, at their end


class Stage(str, enum.Enum):
    TRAIN = "train"
    VAL = "val"
    TEST = "test"
    SERVE = "serve"


def jagged_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Flat positions of the runs ``starts[i] .. starts[i] + lengths[i] - 1``, concatenated:
    the one gather every window, history and batch is read with (no loop over rows)."""
    first_slot = np.cumsum(lengths) - lengths
    return np.repeat(starts - first_slot, lengths) + np.arange(lengths.sum())


@dataclass
class PreparedSequences:
    """A prepared dataset folder loaded into flat numpy arrays.

    Attributes:
        items: ``(E,)`` int64, every user's item list concatenated in user order.
        offsets: ``(U + 1,)`` int64, user u's events are ``items[offsets[u]:offsets[u + 1]]``.
        users: ``(U,)`` int64 user indices.
        val_index, test_index: ``(U,)`` int64 positions of the held-out targets, -1 if none.
        train_end: ``(U,)`` int64 exclusive end of each user's training events (prep's rule,
            :func:`data_prep.steps.train_end`).
        item_counts: ``(N + 1,)`` int64 training occurrences per item, as prep counted them
            (``items.parquet``); PAD 0.
        features: side-feature arrays parallel to ``items``.
        meta: the folder's meta.json.
        catalogue: ``items.parquet`` (original ids, counts, item features), which every
            checkpoint stores; None for sequences built in memory.
    """

    items: np.ndarray
    offsets: np.ndarray
    users: np.ndarray
    val_index: np.ndarray
    test_index: np.ndarray
    train_end: np.ndarray
    item_counts: np.ndarray
    features: dict[str, np.ndarray]
    meta: dict
    catalogue: Catalogue | None = None

    @classmethod
    def load(cls, path: str | Path) -> PreparedSequences:
        """Load the prepared dataset folder ``path`` after checking every file of it.

        Raises:
            PreparedDataError: the folder is missing, damaged or not what recsys-prep writes
                (see :mod:`recsys_seq.data.validate`); nothing is loaded from it.
        """
        meta, frame = check_prepared(Path(path))  # users 0..U-1 in order, Int64 columns
        catalogue = Catalogue.load(
            Path(path), int(meta["items"]), meta.get(schema.META_ITEM_ATTRIBUTES, {})
        )
        lengths = frame[schema.ITEMS].list.len().to_numpy().astype(np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(
            items=frame[schema.ITEMS].explode().to_numpy(),
            offsets=offsets,
            users=frame[schema.USER].to_numpy(),
            val_index=frame[schema.VAL_INDEX].fill_null(-1).to_numpy(),
            test_index=frame[schema.TEST_INDEX].fill_null(-1).to_numpy(),
            train_end=frame.select(steps.train_end())[:, 0].to_numpy().astype(np.int64),
            item_counts=catalogue.counts,
            features={
                name: frame[name].explode().to_numpy() for name in meta[schema.META_SIDE_FEATURES]
            },
            meta=meta,
            catalogue=catalogue,
        )

    @property
    def num_items(self) -> int:
        """Number of real items N (indices 1..N; 0 is PAD)."""
        return int(self.meta["items"])

    def repeats_in_training(self) -> bool:
        """Whether some user's training events name one item twice. Where none does (ratings,
        de-duplicated logs) an item the user has seen is never the next one, which is what
        ``model.exclude_history=auto`` reads; the held-out targets are not looked at."""
        lengths = np.diff(self.offsets)
        rows = np.repeat(np.arange(len(lengths)), lengths)
        in_training = np.arange(len(self.items)) - self.offsets[rows] < self.train_end[rows]
        keys = rows[in_training] * (self.num_items + 1) + self.items[in_training]
        return len(np.unique(keys)) < len(keys)

    def history_keys(self) -> np.ndarray:
        """Sorted unique ``user * (N + 1) + item`` over all events: "has u seen i" lookups."""
        users = np.repeat(self.users, np.diff(self.offsets))
        return np.unique(users * (self.num_items + 1) + self.items)


class WindowDataset(Dataset):
    """One stage's input windows over :class:`PreparedSequences`.

    Indexing by a list of sample indices (``__getitems__``, which the DataLoader uses with a
    batch sampler) returns :class:`JaggedWindows` gathered in one vectorised step.

    Args:
        data: the loaded prepared dataset.
        stage: which windows to expose.
        max_len: the longest input window a model reads (most recent events are kept).
        train_windows: train only: ``all`` windows of the training history, the ``last``,
            every ``prefixes`` cut (one target each), or the ``holdout`` events' windows.
        train_holdout: train only: the last n training events of each user, held out.
        empty_history: train only, with ``prefixes``: each user's first training event is
            a target too, of an empty window (one PAD slot).
        cross_fit_fold: train only: ``(k, K)`` leaves out the users of fold k of K (user
            index mod K), so a model trained here has never seen them (a two-stage run's
            cross-fitted retriever k); None keeps every user.
        sampled_negatives: evaluation only: this many fixed negatives per user (drawn outside
            the user's history) for sampled-candidate metrics; 0 for none.
        negatives_from: ``uniform`` or ``popularity`` (training counts) sampling.
        negatives_seed: fixes the negatives, so every model faces the same candidates.
        eval_users: evaluation only: keep the windows of this many users, drawn once with
            ``eval_users_seed`` (the same users in validation and test, and for every model),
            for models too slow to score every item for every user (DIN); None keeps all.
            All-item metrics over such a sample estimate the full figures without bias.
        eval_users_seed: fixes the sampled users.
    """

    def __init__(
        self,
        data: PreparedSequences,
        stage: Stage | str,
        max_len: int,
        train_windows: str = "all",
        train_holdout: int = 0,
        empty_history: bool = False,
        cross_fit_fold: tuple[int, int] | None = None,
        sampled_negatives: int = 0,
        negatives_from: str = "uniform",
        negatives_seed: int = 0,
        eval_users: int | None = None,
        eval_users_seed: int = 0,
    ) -> None:
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        if train_windows not in TRAIN_WINDOWS:
            raise ValueError(f"train_windows must be one of {TRAIN_WINDOWS}, got {train_windows!r}")
        if train_holdout < 0 or (train_windows == "holdout" and train_holdout == 0):
            raise ValueError(f"train_holdout must be >= 0 (>= 1 for holdout), got {train_holdout}")
        if empty_history and train_windows != "prefixes":
            raise ValueError(f"empty_history needs train_windows='prefixes', got {train_windows!r}")
        if cross_fit_fold is not None:
            fold, folds = cross_fit_fold
            if not (folds >= 2 and 0 <= fold < folds):
                raise ValueError(
                    f"cross_fit_fold must be (k, K) with 0 <= k < K and K >= 2, got {fold, folds}"
                )
        self.data = data
        self.stage = Stage(stage)
        self.max_len = max_len
        user_start = data.offsets[:-1]
        users = data.users
        self.single_target = self.stage is not Stage.TRAIN or train_windows in SINGLE_TARGET
        # events 1..targets of a user are its training targets (the rest is held out)
        targets = np.maximum(data.train_end - train_holdout - 1, 0)
        if self.stage is Stage.TRAIN and train_windows in SINGLE_TARGET:
            if train_windows == "holdout":
                rows = np.repeat(np.arange(len(users)), train_holdout)  # (U * h,)
                held = np.tile(np.arange(train_holdout), len(users))  # 0..h-1 per user
                end = data.train_end[rows] - train_holdout + held
            else:  # prefixes: every target position first..targets of each user
                first = 0 if empty_history else 1
                count = np.maximum(data.train_end - train_holdout - first, 0)
                rows = np.repeat(np.arange(len(users)), count)  # (sum count,)
                end = jagged_positions(np.full_like(count, first), count)
            # the target at position p has an input before it (or an empty one, on request)
            keep = end >= (0 if empty_history else 1)
            rows, end = rows[keep], end[keep]
            self.lengths = np.minimum(end, max_len)
            self.starts = user_start[rows] + end - self.lengths
            users = users[rows]
        elif self.stage is Stage.TRAIN:
            windows = -(-targets // max_len) if train_windows == "all" else np.minimum(targets, 1)
            rows = np.repeat(np.arange(len(users)), windows)  # (W,) one per window
            back = jagged_positions(np.zeros_like(windows), windows)  # 0 = the last window
            last_target = (user_start + targets)[rows] - back * max_len  # absolute index
            first_target = np.maximum(last_target - max_len, user_start[rows]) + 1
            self.lengths = last_target - first_target + 1
            self.starts = first_target - 1  # the input of target t is event t - 1
            users = users[rows]
        else:
            if self.stage is Stage.SERVE:
                end = np.diff(data.offsets)  # the whole known history, all users
            else:
                end = data.val_index if self.stage is Stage.VAL else data.test_index
            keep = end >= 1
            self.lengths = np.minimum(end, max_len)[keep]
            self.starts = (user_start + end)[keep] - self.lengths
            users = users[keep]
        # a window is at most max_len long: 32-bit lengths halve the per-rank copy (widened to
        # int64 per batch, so batches are the same for every dtype)
        self.lengths = self.lengths.astype(np.int32 if max_len < 2**31 else np.int64)
        self.users = users
        self.negatives = None
        if cross_fit_fold is not None and self.stage is Stage.TRAIN:
            self._keep(self.users % folds != fold)
        evaluation = self.stage in (Stage.VAL, Stage.TEST)
        if sampled_negatives and evaluation:
            if negatives_from not in DISTRIBUTIONS:
                raise ValueError(f"negatives_from must be one of {DISTRIBUTIONS}")
            weights = data.item_counts if negatives_from == "popularity" else None
            self.negatives = sample_negatives(
                data.history_keys(),
                self.users,
                data.num_items,
                sampled_negatives,
                seed=negatives_seed + (1 if self.stage is Stage.TEST else 0),
                item_weights=weights,
            )
        if eval_users is not None and evaluation:
            # drawn from all users, not this stage's, so validation and test share them; the
            # negatives above were drawn first, so a sampled user keeps the same candidates
            if eval_users < 1:
                raise ValueError(f"eval_users must be >= 1 or None, got {eval_users}")
            chosen = np.random.default_rng(eval_users_seed).permutation(data.users)[:eval_users]
            self._keep(np.isin(self.users, chosen))
        release_freed_memory()  # the temporaries of the build above (see core/heap.py)

    def keep_users(self, users: np.ndarray) -> None:
        """Only the windows of ``users`` (user indices), in the order of ``self.users``."""
        self._keep(np.isin(self.users, users))

    def _keep(self, rows: np.ndarray) -> None:
        """Restrict the windows to ``rows`` (a boolean mask over them)."""
        self.lengths, self.starts, self.users = (
            self.lengths[rows],
            self.starts[rows],
            self.users[rows],
        )
        if self.negatives is not None:
            self.negatives = self.negatives[rows]

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> JaggedWindows:
        return self.__getitems__([index])

    def __getitems__(self, indices: list[int]) -> JaggedWindows:
        indices = np.asarray(indices, dtype=np.int64)
        starts, lengths = self.starts[indices], self.lengths[indices]
        shown = np.maximum(lengths, 1)  # an empty history is shown as one PAD slot
        flat = jagged_positions(starts, shown)
        pad = np.repeat(lengths == 0, shown)  # (sum shown,) the slots that stand for no event

        def gather(values: np.ndarray) -> torch.Tensor:
            window = values[flat]
            window[pad] = 0
            return torch.from_numpy(window)

        items = self.data.items
        windows = JaggedWindows(
            items=gather(items),
            lengths=torch.from_numpy(shown.astype(np.int64)),
            user=torch.from_numpy(self.users[indices]),
            features={name: gather(values) for name, values in self.data.features.items()},
        )
        if self.stage is Stage.TRAIN and not self.single_target:
            windows.next_items = torch.from_numpy(items[flat + 1])
        elif self.stage is Stage.SERVE:
            rows = np.searchsorted(self.data.users, self.users[indices])
            begin, end = self.data.offsets[rows], self.data.offsets[rows + 1]
            windows.seen = torch.from_numpy(items[jagged_positions(begin, end - begin)])
            windows.seen_lengths = torch.from_numpy(end - begin)
        else:
            windows.target = torch.from_numpy(items[starts + lengths])
            if self.negatives is not None:
                windows.negatives = torch.from_numpy(self.negatives[indices])
        return windows
