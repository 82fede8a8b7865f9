"""The datamodule's options (``conf/data``) as checked plain values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from recsys_seq.core.options import OptionError, checked, option
from recsys_seq.data.negatives import Distribution


@dataclass(frozen=True)
class DataOptions:
    """See :class:`~recsys_seq.data.SequenceDataModule` for what each option does."""

    path: str | None = None  # a prepared dataset folder; None: prepare ``source`` into cache
    source: str | None = None  # demo, or a shared dataset name (data=s3rec_beauty, ...)
    cache_dir: str = "data/prepared"  # where ``source`` is prepared, as <cache_dir>/<source>
    max_len: int = option(50, min=1)
    train_windows: Literal["all", "last", "prefixes", "holdout"] = "all"
    train_holdout: int = option(0, min=0)  # the last n training events of each user held out
    batch_size: int = option(128, min=1)
    max_tokens: int | None = option(None, min=1)
    eval_batch_size: int = option(256, min=1)
    boundaries: list[int] | Literal["suggested"] | None = option(None, min=1)
    pad_to_multiple_of: int | None = option(None, min=1)
    num_workers: int = option(0, min=0)
    pin_memory: bool = False
    persistent_workers: bool = False
    seed: int = 0
    sampled_negatives: int = option(0, min=0)
    negatives_from: Distribution = "uniform"
    negatives_seed: int = 0
    eval_users: int | None = option(None, min=1)
    eval_users_seed: int = 0


def data_options(values: Mapping[str, Any]) -> DataOptions:
    options = checked(DataOptions, values, "data")
    if options.train_windows == "holdout" and options.train_holdout == 0:
        raise OptionError(
            "data.train_windows=holdout trains on the held-out events: set data.train_holdout "
            "to how many (e.g. 1)."
        )
    if options.path is None and options.source is None:
        raise OptionError(
            "No data: pass data.path=<prepared dataset folder> (made by recsys-prep), or pick "
            "a bundled or shared dataset with data=demo or data=<name> (conf/data/)."
        )
    return options
