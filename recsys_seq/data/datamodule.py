"""LightningDataModule over a prepared dataset folder."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import lightning as L
import numpy as np
from torch.utils.data import DataLoader

from data_prep import schema
from recsys_seq.core.options import as_plain
from recsys_seq.core.publish import recover
from recsys_seq.data.batch import PaddedBatchCollator
from recsys_seq.data.dataset import PreparedSequences, Stage, WindowDataset
from recsys_seq.data.facts import DataFacts
from recsys_seq.data.options import DataOptions
from recsys_seq.data.sampler import BucketBatchSampler
from recsys_seq.data.shared import check_source, prepare_source


class SequenceDataModule(L.LightningDataModule):
    """Length-bucketed train/val/test/serve loaders over a prepared dataset.

    The ``serve`` stage (``predict_dataloader``) holds one window per user after the whole
    known history, for :meth:`Trainer.predict`; :meth:`serve_users` restricts it.

    Batch size and token budget are per process: with W DDP processes a step consumes W
    batches.

    Args:
        path: prepared dataset folder (``recsys-prep`` output); read only, never written.
        source: with no ``path``: ``demo`` (the bundled log) or a shared dataset name,
            prepared on first use into ``cache_dir/<source>`` (:func:`prepare_source`).
        cache_dir: where sources are prepared.
        max_len: longest input window; older events are dropped.
        train_windows: ``all`` trains on a user's whole training history, cut into
            consecutive windows of ``max_len`` targets; ``last`` on its last window only (the
            original SASRec), which leaves most events of long histories unused; ``prefixes``
            on every cut of the training history, one window ending at each target (the
            S3-Rec line's samples: training sees the evaluation's shape); ``holdout`` on the
            ``train_holdout`` held-out events only, one window (and target) each.
        train_holdout: hold out each user's last n training events from ``all``/``last``
            training (a two-stage run's retriever), for a model that trains on them
            (``holdout``: its ranker).
        batch_size: sequences per training batch (unless ``max_tokens`` is set).
        max_tokens: token budget per training batch (``longest x batch size``).
        eval_batch_size: sequences per validation/test batch.
        boundaries: bucket upper bounds; ``suggested`` for recsys-prep's suggestion; None
            for the sampler's geometric buckets (see :meth:`bucket_boundaries`).
        pad_to_multiple_of: round padded lengths up (e.g. 8 on GPUs).
        num_workers, pin_memory, persistent_workers: DataLoader options.
        seed: shuffle seed (combined with the epoch).
        sampled_negatives: also evaluate against this many fixed sampled negatives per user
            (reported as ``<stage>/sampled<n>/...``); 0 for all-item ranking only.
        negatives_from: ``uniform`` or ``popularity`` negative sampling.
        negatives_seed: seed of the fixed negatives (kept apart from ``seed`` so that
            every model and training seed faces the same candidates).
        eval_users: validate and test on this many users drawn once (the same for every
            model and seed) instead of all; for models too slow to rank every item for every
            user. None evaluates everyone.
        eval_users_seed: seed of that draw.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        max_len: int = 50,
        train_windows: str = "all",
        train_holdout: int = 0,
        batch_size: int = 128,
        max_tokens: int | None = None,
        eval_batch_size: int = 256,
        boundaries: list[int] | str | None = None,
        pad_to_multiple_of: int | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        seed: int = 0,
        sampled_negatives: int = 0,
        negatives_from: str = "uniform",
        negatives_seed: int = 0,
        eval_users: int | None = None,
        eval_users_seed: int = 0,
        source: str | None = None,
        cache_dir: str | Path = "data/prepared",
    ) -> None:
        super().__init__()
        if path is None and source is None:
            raise ValueError("give a prepared dataset path or a source to prepare")
        self.source = None if path is not None else check_source(source)
        self.path = Path(os.path.abspath(path if path is not None else Path(cache_dir) / source))
        self.max_len = max_len
        self.train_windows = train_windows
        self.train_holdout = train_holdout
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.eval_batch_size = eval_batch_size
        self.boundaries = boundaries
        self.collate = PaddedBatchCollator(pad_to_multiple_of)
        self.loader_options = dict(
            num_workers=num_workers,
            pin_memory=pin_memory,
            persistent_workers=persistent_workers and num_workers > 0,
        )
        self.seed = seed
        self.negatives = dict(
            sampled_negatives=sampled_negatives,
            negatives_from=negatives_from,
            negatives_seed=negatives_seed,
        )
        self.evaluation = dict(eval_users=eval_users, eval_users_seed=eval_users_seed)
        self.serve_stage = Stage.SERVE
        self.served_users: np.ndarray | None = None
        self.options: DataOptions | None = None
        self._data: PreparedSequences | None = None

    @classmethod
    def from_options(cls, options: DataOptions) -> SequenceDataModule:
        datamodule = cls(**as_plain(options))
        datamodule.options = options
        return datamodule

    def prepare_data(self) -> None:
        """Prepare the ``source`` dataset (kept when already prepared); a given path is only
        ever read."""
        if self.source is not None:
            prepare_source(self.source, self.path)

    @property
    def data(self) -> PreparedSequences:
        """The loaded dataset (loaded on first use, once per process)."""
        if self._data is None:
            recover(self.path)  # a publish of this folder killed half-way: put it back
            self._data = PreparedSequences.load(self.path)
        return self._data

    @property
    def num_items(self) -> int:
        return self.data.num_items

    @property
    def sampled_negatives(self) -> int:
        """Fixed negatives per user in evaluation batches (0: all-item ranking only)."""
        return self.negatives["sampled_negatives"]

    @property
    def meta(self) -> dict:
        return self.data.meta

    def facts(self) -> DataFacts:
        """What a model built for this data needs to know (see :class:`DataFacts`); the
        record names the folder actually read, as an absolute path, so a checkpoint never
        asks for a dataset to be prepared."""
        options = self.options or DataOptions(path=str(self.path))
        record = as_plain(dataclasses.replace(options, path=str(self.path), source=None))
        return DataFacts(self.data.item_counts, self.sampled_negatives, record, self.data.catalogue)

    def bucket_boundaries(self) -> list[int] | None:
        """``data.boundaries``: a list; ``suggested``, the buckets recsys-prep suggested for
        padding to bucket edges (meta.json), cut at ``max_len``; or None, the sampler's own
        fine geometric buckets, which pad least when batches are padded to their own longest
        window (demo: 98.6% real tokens against 95.0% with prep's five)."""
        if self.boundaries != "suggested":
            return list(self.boundaries) if self.boundaries else None
        suggested = self.meta.get(schema.META_BUCKETS) or []
        return [b for b in suggested if b < self.max_len] + [self.max_len]

    def serve_users(self, stage: Stage | str, users: np.ndarray | None) -> None:
        """What :meth:`predict_dataloader` scores: ``stage`` (serve, or val/test for the
        evaluation windows) for ``users`` (user indices; None: everyone)."""
        self.serve_stage = Stage(stage)
        self.served_users = users

    def dataset(self, stage: Stage | str) -> WindowDataset:
        return WindowDataset(
            self.data,
            stage,
            self.max_len,
            train_windows=self.train_windows,
            train_holdout=self.train_holdout,
            **self.negatives,
            **self.evaluation,
        )

    def dataloader(
        self,
        stage: Stage | str,
        num_replicas: int | None = None,
        rank: int | None = None,
        users: np.ndarray | None = None,
    ) -> DataLoader:
        """One stage's loader, sharded for ``rank`` of ``num_replicas`` (default: the attached
        trainer's world, else a single process), over ``users`` only when given."""
        stage = Stage(stage)
        if num_replicas is None:
            trainer = self.trainer
            num_replicas, rank = (trainer.world_size, trainer.global_rank) if trainer else (1, 0)
        dataset = self.dataset(stage)
        if users is not None:
            dataset.keep_users(users)
        training = stage is Stage.TRAIN
        sampler = BucketBatchSampler(
            dataset.lengths,
            batch_size=self.batch_size if training else self.eval_batch_size,
            max_tokens=self.max_tokens if training else None,
            boundaries=self.bucket_boundaries(),
            shuffle=training,
            seed=self.seed,
            num_replicas=num_replicas,
            rank=rank or 0,
            allow_repeats=training,
        )
        return DataLoader(
            dataset, batch_sampler=sampler, collate_fn=self.collate, **self.loader_options
        )

    def train_dataloader(self) -> DataLoader:
        loader = self.dataloader(Stage.TRAIN)
        trainer = self.trainer
        if trainer is not None and trainer.fit_loop.restarting:
            # Resumed from a mid-epoch checkpoint: the restored progress says how many of this
            # epoch's batches were trained on ("processed": the checkpoint is written after the
            # optimiser step, before Lightning marks the batch "completed"); skip exactly those.
            done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
            if 0 < done < len(loader):  # not an end-of-epoch checkpoint
                loader.batch_sampler.resume(trainer.current_epoch, done)
        return loader

    def val_dataloader(self) -> DataLoader:
        return self.dataloader(Stage.VAL)

    def test_dataloader(self) -> DataLoader:
        return self.dataloader(Stage.TEST)

    def predict_dataloader(self) -> DataLoader:
        return self.dataloader(self.serve_stage, users=self.served_users)
