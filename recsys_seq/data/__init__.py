"""Prepared sequences -> length-bucketed, padded batches with a boolean mask."""

from recsys_seq.data.batch import IGNORE_INDEX, PaddedBatchCollator
from recsys_seq.data.datamodule import SequenceDataModule
from recsys_seq.data.dataset import PreparedSequences, Stage, WindowDataset
from recsys_seq.data.sampler import BucketBatchSampler

__all__ = [
    "IGNORE_INDEX",
    "BucketBatchSampler",
    "PaddedBatchCollator",
    "PreparedSequences",
    "SequenceDataModule",
    "Stage",
    "WindowDataset",
]
