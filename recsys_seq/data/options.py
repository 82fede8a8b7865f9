"""The datamodule's options (``conf/data``) as checked plain values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from recsys_seq.core.options import OptionError, checked, option
from recsys_seq.data.negatives import Distribution

DEFAULT_MAX_LEN = 50  # the window of the published sequential-recommendation figures


@dataclass(frozen=True)
class DataOptions:
    """The data options (``conf/data``), each default written once, here.

    Attributes:
        path: prepared dataset folder (``recsys-prep`` output); read only, never written.
        source: with no ``path``: ``demo`` (the bundled log) or a shared dataset name,
            prepared on first use into ``cache_dir/<source>`` (:func:`prepare_source`).
        cache_dir: where sources are prepared.
        loader: ``mapped`` (every process maps the arrays of one shared cache, derived once
            per dataset version: see :mod:`recsys_seq.data.mapped`) or ``memory`` (every
            process decodes the prepared folder into private arrays).
        array_cache: where ``mapped`` keeps its caches, as ``<array_cache>/<fingerprint>/``;
            apart from the prepared folder, which may be a read-only share and is never
            written. Node-local disk serves one node's ranks best; a shared file system
            serves every node from one build.
        max_len: longest input window; older events are dropped.
        train_windows: ``all`` trains on a user's whole training history, cut into
            consecutive windows of ``max_len`` targets; ``last`` on its last window only (the
            original SASRec), which leaves most events of long histories unused; ``prefixes``
            on every cut of the training history, one window ending at each target (the
            S3-Rec line's samples: training sees the evaluation's shape); ``holdout`` on the
            ``train_holdout`` held-out events only, one window (and target) each.
        empty_history: with ``prefixes``, also train each user's first event as the target
            of an empty history (one PAD slot), as the S3-Rec line's code does.
        train_holdout: hold out each user's last n training events from ``all``/``last``
            training (a two-stage run's retriever), for a model that trains on them
            (``holdout``: its ranker).
        cross_fit_fold: ``[k, K]``: training leaves out the users of fold k of K (user index
            mod K; validation and test keep everyone): the retriever a cross-fitted two-stage
            run trains for fold k, whose scores of those users' training windows are honest.
        batch_size: sequences per training batch (unless ``max_tokens`` is set).
        max_tokens: token budget per training batch (``longest x batch size``).
        eval_batch_size: sequences per validation/test batch.
        batching: ``length`` groups training batch mates of almost equal length (least
            padding); ``random`` draws each training batch at random, padded to its own
            longest window (more padding, batch mates of every length). Evaluation batches
            are always grouped: their order changes no figure.
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

    path: str | None = None  # a prepared dataset folder; None: prepare ``source`` into cache
    source: str | None = None  # demo, or a shared dataset name (data=s3rec_beauty, ...)
    cache_dir: str = "data/prepared"  # where ``source`` is prepared, as <cache_dir>/<source>
    loader: Literal["mapped", "memory"] = "memory"
    array_cache: str = "data/arrays"  # mapped: <array_cache>/<fingerprint>/*.npy
    max_len: int = option(DEFAULT_MAX_LEN, min=1)
    train_windows: Literal["all", "last", "prefixes", "holdout"] = "all"
    empty_history: bool = False  # prefixes: the first event too, after an empty history
    train_holdout: int = option(0, min=0)  # the last n training events of each user held out
    cross_fit_fold: list[int] | None = option(None, min=0)  # [k, K]: fold k's users left out
    batch_size: int = option(128, min=1)
    max_tokens: int | None = option(None, min=1)
    eval_batch_size: int = option(256, min=1)
    batching: Literal["length", "random"] = "length"
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
    if options.empty_history and options.train_windows != "prefixes":
        raise OptionError(
            "data.empty_history=true trains the first event of each history as one more "
            f"prefix: it needs data.train_windows=prefixes (got {options.train_windows})."
        )
    fold = options.cross_fit_fold
    if fold is not None and (len(fold) != 2 or not fold[0] < fold[1] or fold[1] < 2):
        raise OptionError(
            f"data.cross_fit_fold={list(fold)}: give [k, K], fold k of K >= 2 folds "
            "(0 <= k < K), e.g. [0, 2]."
        )
    if options.path is None and options.source is None:
        raise OptionError(
            "No data: pass data.path=<prepared dataset folder> (made by recsys-prep), or pick "
            "a bundled or shared dataset with data=demo or data=<name> (conf/data/)."
        )
    return options
