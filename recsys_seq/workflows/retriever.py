"""The retriever of a two-stage run (``rerank=topk``): a trained checkpoint, or one trained
by the same command.

    recsys-train model=din rerank=topk rerank.retriever.ckpt_path=<sasrec best.ckpt>
    recsys-train experiment=s3rec_beauty_rerank  # its retriever: experiment s3rec_beauty_sasrec

A retriever named by ``experiment`` is trained first, into ``<run>/retriever`` (a run folder of
its own: checkpoints, metrics, curves), with that experiment's model, epochs, schedule and
patience, and ``data.train_holdout`` set to ``rerank.holdout`` (the events the ranker trains
on); how the command runs carries over to it (devices, precision, ``fast_dev_run`` and
batch limits, callbacks switched off, paths, seed, logger), its length does not (the
ranker's ``trainer.max_epochs`` or ``max_time`` are the ranker's). A rerun of the command
reuses a retriever that finished (its ``metrics.json`` names its best checkpoint).

With ``rerank.cross_fit=K`` the same experiment is also trained K times without one fold of
users each (``data.cross_fit_fold=[k, K]``), into ``<run>/retriever_fold<k>``; with a
``ckpt_path``, ``rerank.retriever.fold_ckpt_paths`` names those K checkpoints, in fold order.
Every checkpoint is checked for the users it left out: a fold retriever must have left out
exactly its fold, the serving retriever nobody.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf, open_dict

from recsys_seq import configs
from recsys_seq.checkpoint import CheckpointError, check_same_items, open_checkpoint
from recsys_seq.core.options import OptionError, checked
from recsys_seq.core.run_folders import METRICS_FILE
from recsys_seq.data import SequenceDataModule
from recsys_seq.data.options import data_options
from recsys_seq.models import ModelSpec
from recsys_seq.models.spec import RerankOptions

RETRIEVER_FOLDER = "retriever"
# how long a run lasts belongs to the run: the ranker's length is not the retriever's
LENGTH_KEYS = frozenset({"max_epochs", "min_epochs", "max_steps", "min_steps", "max_time"})


@dataclass(frozen=True)
class RetrieverSource:
    """``rerank.retriever``: exactly one of a checkpoint and an experiment to train."""

    ckpt_path: str | None = None
    experiment: str | None = None
    overrides: list[str] = field(default_factory=list)
    fold_ckpt_paths: list[str] = field(default_factory=list)  # with ckpt_path and cross_fit


@dataclass(frozen=True)
class Rerank:
    """A two-stage run's checked ``rerank`` section: where its retriever comes from, and how
    the ranker re-scores that retriever's candidates."""

    retriever: RetrieverSource
    options: RerankOptions


def rerank_options(values: Any) -> Rerank | None:
    """The checked ``rerank`` section (None: a one-stage run), before any work."""
    if values is None:
        return None
    values = dict(configs.plain(values))
    source = checked(RetrieverSource, values.pop("retriever", None), "rerank.retriever")
    if (source.ckpt_path is None) == (source.experiment is None):
        raise OptionError(
            "rerank.retriever needs exactly one of ckpt_path (a trained sasrec or gru "
            "checkpoint of the same data) and experiment (trained first by this command)."
        )
    if source.overrides and source.experiment is None:
        raise OptionError("rerank.retriever.overrides apply to a retriever experiment only.")
    options = checked(RerankOptions, values, "rerank")
    if options.cross_fit == 1:
        raise OptionError(
            "rerank.cross_fit=1: cross-fitting needs K >= 2 folds of users (e.g. 2), or 0 for none."
        )
    if options.cross_fit and options.holdout:
        raise OptionError(
            f"rerank.cross_fit={options.cross_fit} and rerank.holdout={options.holdout} are two "
            "ways of giving the ranker honest retriever scores: choose one."
        )
    if options.cross_fit and options.init_from_retriever:
        raise OptionError(
            f"rerank.cross_fit={options.cross_fit} with rerank.init_from_retriever=true: the "
            "ranker would start from the serving retriever's embeddings, trained on the very "
            "windows cross-fitting keeps its scores honest on. Leave init_from_retriever false."
        )
    folds = len(source.fold_ckpt_paths)
    if folds and source.ckpt_path is None:
        raise OptionError(
            "rerank.retriever.fold_ckpt_paths go with rerank.retriever.ckpt_path; an experiment "
            "trains its fold retrievers itself."
        )
    if folds and not options.cross_fit:
        raise OptionError(
            "rerank.retriever.fold_ckpt_paths are read with rerank.cross_fit=K (K of them) only."
        )
    if source.ckpt_path is not None and folds != options.cross_fit:
        raise OptionError(
            f"rerank.cross_fit={options.cross_fit} with rerank.retriever.ckpt_path needs "
            f"{options.cross_fit} rerank.retriever.fold_ckpt_paths (got {folds}): the "
            f"checkpoints trained with data.cross_fit_fold=[k, {options.cross_fit}], in fold "
            "order. Or name rerank.retriever.experiment: this command trains them."
        )
    return Rerank(source, options)


@dataclass(frozen=True)
class RetrieverPlan:
    """Where a run's retriever comes from, checked: ``ready`` (spec and network weights of a
    checkpoint, or of a retriever that finished in ``folder``), else ``config`` to train."""

    folder: Path
    ready: tuple[ModelSpec, dict[str, torch.Tensor]] | None = None
    config: DictConfig | None = None


def plan_retriever(
    source: RetrieverSource,
    cfg: DictConfig,
    datamodule: SequenceDataModule,
    run_dir: Path,
    holdout: int,
    fold: tuple[int, int] | None = None,
) -> RetrieverPlan:
    """Check the retriever ``source`` names against the ranker's data, before any work: the
    same prepared folder, ``holdout`` training events per user it never trained on, and the
    users it left out: those of ``fold`` ``(k, K)`` (fold retriever k), else nobody.

    ``cfg`` is the ranker's composed config, not its checked options: a retriever experiment's
    config is composed from it (:func:`retriever_config`), taking its sections as written
    (the trainer's and logger's interpolations unresolved, to resolve in the retriever's run)."""
    if fold is None:
        folder, path = run_dir / RETRIEVER_FOLDER, source.ckpt_path
    else:
        folder = run_dir / f"{RETRIEVER_FOLDER}_fold{fold[0]}"
        path = source.fold_ckpt_paths[fold[0]] if source.ckpt_path is not None else None
    if path is not None:
        return RetrieverPlan(folder, ready=_from_checkpoint(Path(path), datamodule, holdout, fold))
    finished = _finished_checkpoint(folder)
    if finished is not None:
        return RetrieverPlan(folder, ready=_from_checkpoint(finished, datamodule, holdout, fold))
    config = retriever_config(source, cfg, folder, holdout, fold)
    _check_same_data(config, datamodule)
    return RetrieverPlan(folder, config=config)


def obtain_retriever(
    plan: RetrieverPlan, train: Callable[[DictConfig], tuple[dict[str, Any], dict[str, Any]]]
) -> tuple[ModelSpec, dict[str, torch.Tensor]]:
    """The planned retriever's spec and ``NextItemModel`` weights, trained now by ``train``
    (recsys-train's own function) into ``plan.folder`` when it is not ready."""
    if plan.ready is not None:
        return plan.ready
    print(f"Training the retriever into {plan.folder}")
    _, objects = train(plan.config)
    task = objects["model"]  # after testing: the best checkpoint's weights when one was kept
    return task.spec, task.model.state_dict()


def retriever_config(
    source: RetrieverSource,
    cfg: DictConfig,
    folder: Path,
    holdout: int,
    fold: tuple[int, int] | None = None,
) -> DictConfig:
    """``recsys-train experiment=<source.experiment> <source.overrides>`` as a config, with
    what says how the command runs carried over from ``cfg`` (module docstring), the
    ranker's ``holdout`` events held out of its training, and the users of ``fold``."""
    composed = compose_experiment(source)
    trainer = OmegaConf.to_container(cfg.trainer, resolve=False)
    with open_dict(composed):
        composed.paths = OmegaConf.to_container(cfg.paths, resolve=True)
        composed.paths.output_dir = str(folder)
        composed.seed = cfg.seed
        composed.baselines = cfg.get("baselines", True)
        logger = cfg.get("logger")
        composed.logger = None if logger is None else OmegaConf.to_container(logger, resolve=False)
        for key, value in trainer.items():
            if key not in LENGTH_KEYS:
                composed.trainer[key] = value
        for name, callback in (cfg.get("callbacks") or {}).items():
            if callback is None:
                composed.callbacks[name] = None
        composed.rerank = None
        composed.data.train_holdout = holdout
        composed.data.cross_fit_fold = None if fold is None else list(fold)
    return composed


def compose_experiment(source: RetrieverSource) -> DictConfig:
    """``recsys-train experiment=<source.experiment> <source.overrides>`` composed where the
    ranker's own ``experiment=`` would be found: the project's configs and the folders of the
    run's ``hydra.searchpath``. A name or override that does not compose is an option error
    naming the experiments there is."""
    overrides = [f"experiment={source.experiment}", *source.overrides]
    searchpath = list(HydraConfig.get().searchpath) if HydraConfig.initialized() else []
    if searchpath:
        overrides.append(f"hydra.searchpath=[{','.join(map(repr, searchpath))}]")
    try:
        return configs.compose_train(overrides)
    except HydraException as error:
        raise OptionError(_composition_problem(source, error)) from None


def _composition_problem(source: RetrieverSource, error: HydraException) -> str:
    options = getattr(error, "options", None)
    if isinstance(error, MissingConfigException) and f"experiment/{source.experiment}" in str(
        error
    ):
        known = ", ".join(options or []) or "none"
        return (
            f"rerank.retriever.experiment={source.experiment}: there is no experiment config of "
            f"that name (experiments: {known}). Add a folder of your own experiments with "
            "hydra.searchpath=[file://<folder>], or give a trained retriever with "
            "rerank.retriever.ckpt_path=<best.ckpt>."
        )
    message = " ".join(str(error).split("Config search path:")[0].split())
    return (
        f"rerank.retriever.overrides={source.overrides} do not compose with experiment "
        f"{source.experiment}: {message}"
    )


def _check_same_data(retriever_cfg: DictConfig, datamodule: SequenceDataModule) -> None:
    path = SequenceDataModule.from_options(data_options(configs.plain(retriever_cfg.data))).path
    if Path(path).resolve() != Path(datamodule.path).resolve():
        raise OptionError(
            f"rerank.retriever.experiment trains on {path}, the ranker on {datamodule.path}: "
            "both stages must use the same prepared data."
        )


def _same_folder(trained_on: str | None, path: str | Path) -> bool:
    return trained_on is not None and Path(trained_on).resolve() == Path(path).resolve()


def _finished_checkpoint(folder: Path) -> Path | None:
    """The best checkpoint of a retriever run that finished in ``folder``, if any."""
    try:
        saved = json.loads((folder / METRICS_FILE).read_text()).get("checkpoint")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(saved) if isinstance(saved, str) and Path(saved).is_file() else None


def _from_checkpoint(
    path: Path, datamodule: SequenceDataModule, holdout: int, fold: tuple[int, int] | None
) -> tuple[ModelSpec, dict[str, torch.Tensor]]:
    trained = open_checkpoint(path)
    if trained.rerank is not None:
        raise CheckpointError(f"{path} is a two-stage model; a retriever is a one-stage model.")
    check_same_items(trained.spec, datamodule.meta["item_fingerprint"], datamodule.path, path)
    if trained.data.train_windows == "holdout" or trained.data.train_holdout < holdout:
        raise OptionError(
            f"rerank.holdout={holdout}: the ranker trains on each user's last {holdout} training "
            f"event(s), but the retriever {path} trained on them (data.train_holdout="
            f"{trained.data.train_holdout}). Train it with data.train_holdout={holdout} (as "
            "rerank.retriever.experiment does), or set rerank.holdout=0 to train the ranker on "
            "the retriever's own training windows."
        )
    left_out = trained.data.cross_fit_fold
    if fold is None and left_out is not None:
        raise OptionError(
            f"The retriever {path} never trained on the users of fold {left_out[0]} of "
            f"{left_out[1]} (data.cross_fit_fold={list(left_out)}): it is a cross-fitted fold "
            "retriever. Serve with one trained on every user, and give the fold ones as "
            "rerank.retriever.fold_ckpt_paths with rerank.cross_fit."
        )
    if fold is not None and not _same_folder(trained.data.path, datamodule.path):
        raise OptionError(
            f"rerank.cross_fit={fold[1]}: fold retriever {fold[0]} ({path}) trained on "
            f"{trained.data.path}, the ranker on {datamodule.path}. Folds are user indices of "
            "one prepared dataset: train the fold retrievers on the ranker's."
        )
    if fold is not None and (left_out is None or tuple(left_out) != fold):
        raise OptionError(
            f"rerank.cross_fit={fold[1]}: fold retriever {fold[0]} ({path}) must have trained "
            f"without the users of fold {fold[0]} (data.cross_fit_fold={list(fold)}), but it "
            f"was trained with data.cross_fit_fold={None if left_out is None else list(left_out)}."
        )
    network = {
        name.removeprefix("model."): weight
        for name, weight in trained.weights.items()
        if name.startswith("model.")
    }
    return trained.spec, network
