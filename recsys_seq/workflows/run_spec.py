"""What a training run's composed config means, read and checked once, before any work: a
:class:`TrainRun`, whose fields :func:`~recsys_seq.workflows.train.train` and the functions
below it read instead of the config."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from recsys_seq import configs
from recsys_seq.core.options import OptionError
from recsys_seq.data.options import DataOptions, data_options
from recsys_seq.models.spec import RerankOptions
from recsys_seq.workflows.retriever import Rerank, rerank_options
from recsys_seq.workflows.trainer import check_trainer


@dataclass(frozen=True)
class TrainRun:
    """One ``recsys-train`` run's checked options.

    Attributes:
        data: the data the run trains on (a ranker's: :func:`ranker_data`).
        model: ``model`` and ``optimized_metric`` as plain values, checked as far as they go
            without the data (:func:`~recsys_seq.configs.model_values`); the data completes
            them into the model spec (:func:`~recsys_seq.configs.spec_for_data`).
        trainer: every ``trainer.<key>`` as plain values, checked
            (:func:`~recsys_seq.workflows.trainer.check_trainer`): Lightning's Trainer's.
        rerank: a two-stage run's retriever and rerank options; None for one stage.
        seed: seeds every random draw of the run (``L.seed_everything``).
        task: ``task_name``, which the run folder's record names.
        output_dir: the run folder (``paths.output_dir``).
        ckpt_path: the checkpoint to resume from; ``last``: the run folder's latest.
        baselines: also evaluate the popularity baseline.
    """

    data: DataOptions
    model: dict[str, Any]
    trainer: dict[str, Any]
    rerank: Rerank | None
    seed: int
    task: str
    output_dir: Path
    ckpt_path: str | None
    baselines: bool


def train_run(cfg: DictConfig) -> TrainRun:
    """``recsys-train``'s composed config checked section by section, each mistake one
    paragraph naming its option, before any data is read."""
    data = data_options(configs.plain(cfg.data))
    model = configs.model_values(cfg)
    rerank = rerank_options(cfg.get("rerank"))
    if rerank is not None:
        data = ranker_data(data, rerank.options)
    trainer = configs.plain(cfg.trainer)
    check_trainer(trainer)
    return TrainRun(
        data=data,
        model=model,
        trainer=trainer,
        rerank=rerank,
        seed=cfg.seed,
        task=str(cfg.task_name),
        output_dir=Path(cfg.paths.output_dir),
        ckpt_path=cfg.get("ckpt_path"),
        baselines=bool(cfg.get("baselines")),
    )


def ranker_data(data: DataOptions, options: RerankOptions) -> DataOptions:
    """The ranker's data: with ``rerank.holdout`` > 0 it trains on the held-out events only.
    It trains on every user: only a fold retriever leaves users out."""
    if data.cross_fit_fold is not None:
        raise OptionError(
            f"data.cross_fit_fold={list(data.cross_fit_fold)} leaves users out of a retriever's "
            "training; a ranker trains on every user (rerank.cross_fit=K trains its fold "
            "retrievers)."
        )
    if options.holdout == 0:
        return data
    return dataclasses.replace(data, train_windows="holdout", train_holdout=options.holdout)
