"""One trial: recsys-train's config composed with the trial's values, trained in the trial's
own run folder ``<sweep dir>/trials/<number>/`` with its output kept in ``train.log`` there.

The console gets two lines per trial: its number and values, then its result and time (or
that it failed, or was interrupted, and where its output is).
"""

from __future__ import annotations

import copy
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import optuna
from hydra import compose
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from recsys_seq.core.errors import UserError
from recsys_seq.core.options import OptionError
from recsys_seq.core.publish import OutputRefused
from recsys_seq.optimized_metric import best_key
from recsys_seq.tune.folder import TRIALS
from recsys_seq.tune.interrupt import StopRequest, TrialInterrupted, stops_trial
from recsys_seq.tune.space import Param, as_overrides, suggest
from recsys_seq.workflows.train import train

LOG_FILE = "train.log"
HYDRA_DIR = ".hydra"
# a trial's own output goes to its log: no progress bar or model summary to draw at all
QUIET = (
    "++trainer.enable_progress_bar=false",
    "++trainer.enable_model_summary=false",
    "++callbacks.progress_bar=null",
    "++callbacks.model_summary=null",
)
_LOGGERS = ("", "lightning.pytorch", "lightning.fabric")  # those that print a run's lines


def trial_config(overrides: Sequence[str], run_dir: Path) -> DictConfig:
    """recsys-train's config (``conf/train.yaml``) with ``overrides``, quiet, writing into
    ``run_dir``, with its ``hydra`` node (the config choices). Needs Hydra initialised with
    the project's configs (the running command).

    Raises:
        OptionError: recsys-train refuses an override (an unknown key or config name).
    """
    try:
        cfg = compose("train", overrides=[*overrides, *QUIET], return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as error:
        reason = " ".join(str(error).split())
        given = " ".join(overrides)
        raise OptionError(f"recsys-train refuses the overrides {given}: {reason}") from None
    with open_dict(cfg):
        cfg.paths.output_dir = str(run_dir)
        cfg.hydra.runtime.output_dir = str(run_dir)
        cfg.hydra.runtime.cwd = os.getcwd()
    return cfg


def write_run_files(run_dir: Path, cfg: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """Write what Hydra writes into a run folder when the run starts (``.hydra/config.yaml``,
    ``hydra.yaml``, ``overrides.yaml``), so a trial is a run like any other (recsys-report
    reads them); returns the config without its ``hydra`` node, as recsys-train gets it."""
    folder = run_dir / HYDRA_DIR
    folder.mkdir(parents=True)
    run_cfg = copy.deepcopy(cfg)
    with open_dict(run_cfg):
        del run_cfg.hydra
    OmegaConf.save(run_cfg, folder / "config.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": cfg.hydra}), folder / "hydra.yaml")
    OmegaConf.save(OmegaConf.create(list(overrides)), folder / "overrides.yaml")
    return run_cfg


@contextmanager
def output_to(log_file: Path) -> Iterator[None]:
    """Everything a run prints (Lightning's lines, warnings, the results table) goes to
    ``log_file`` instead of the console."""
    with (
        log_file.open("a", encoding="utf-8") as stream,
        redirect_stdout(stream),
        redirect_stderr(stream),
    ):
        handler = logging.StreamHandler(stream)
        loggers = [logging.getLogger(name) for name in _LOGGERS]
        saved = [logger.handlers for logger in loggers]
        for logger in loggers:
            logger.handlers = [handler] if logger.handlers else []
        try:
            yield
        finally:
            for logger, handlers in zip(loggers, saved, strict=True):
                logger.handlers = handlers


class Objective:
    """What a study maximises: the best validation value of ``optimized_metric`` of a
    recsys-train run with the trial's values.

    Each trial stores, as user attributes, its overrides, run folder, seconds and every metric
    it measured (for the summary, on any machine that can reach the database). Ctrl-C
    (``stop``) stops its training at once (:func:`~recsys_seq.tune.interrupt.stops_trial`).
    """

    def __init__(
        self,
        space: Mapping[str, Param],
        base_overrides: Sequence[str],
        sweep_dir: Path,
        optimized_metric: str,
        stop: StopRequest,
    ) -> None:
        self.space = space
        self.base_overrides = list(base_overrides)
        self.trials_dir = sweep_dir / TRIALS
        self.key = best_key(optimized_metric)
        self.stop = stop

    def __call__(self, trial: optuna.Trial) -> float:
        params = as_overrides(suggest(self.space, trial))
        run_dir = self.trials_dir / str(trial.number)
        print(f"trial {trial.number}  " + "  ".join(params), flush=True)
        started = time.perf_counter()
        try:
            with stops_trial(self.stop, trial):
                metrics = self._train(run_dir, [*self.base_overrides, *params])
        except BaseException as error:
            seconds = time.perf_counter() - started
            what = "interrupted (Ctrl-C)" if isinstance(error, TrialInterrupted) else "failed"
            print(
                f"trial {trial.number}  {what} after {seconds:.1f} s; its output: "
                f"{run_dir / LOG_FILE}",
                flush=True,
            )
            raise
        seconds = time.perf_counter() - started
        numbers = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        trial.set_user_attr("overrides", params)
        trial.set_user_attr("run_dir", str(run_dir))
        trial.set_user_attr("seconds", seconds)
        trial.set_user_attr("metrics", {k: v for k, v in numbers.items() if math.isfinite(v)})
        value = metrics.get(self.key)
        if value is None:
            raise UserError(
                f"Trial {trial.number} reported no {self.key} (its metrics: "
                f"{run_dir / 'metrics.json'}); optimized_metric must be a validation metric "
                "the model logs, e.g. val/ndcg@10."
            )
        if not math.isfinite(value):  # a diverged run: counted, never the best
            print(f"trial {trial.number}  {self.key} = {value}  {seconds:.1f} s  (pruned)")
            raise optuna.TrialPruned(f"{self.key} is {value}")
        print(
            f"trial {trial.number}  {self.key} = {value:.4f}  {seconds:.1f} s  "
            f"({self._best_so_far(trial, value)})",
            flush=True,
        )
        return float(value)

    def _train(self, run_dir: Path, overrides: list[str]) -> dict[str, Any]:
        if run_dir.exists():
            raise OutputRefused(
                f"Trial folder {run_dir} already exists, though the study has no such trial "
                "yet: left from a study whose database was removed? Remove "
                f"{self.trials_dir} or pick another tune.sweep_dir."
            )
        cfg = write_run_files(run_dir, trial_config(overrides, run_dir), overrides)
        with output_to(run_dir / LOG_FILE):
            metrics, _ = train(cfg)
        return metrics

    @staticmethod
    def _best_so_far(trial: optuna.Trial, value: float) -> str:
        done = trial.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        best = max(done, key=lambda t: t.value, default=None)
        if best is None or value > best.value:
            return "best so far"
        return f"best: trial {best.number}, {best.value:.4f}"
