"""recsys-tune from start to end: options checked, the sweep folder claimed, the study opened
(or resumed), worked until it has its trials (or Ctrl-C), and summarised.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig
from optuna.trial import TrialState

from recsys_seq import configs
from recsys_seq.core.objects import make
from recsys_seq.optimized_metric import best_key
from recsys_seq.tune.folder import BEST, SUMMARY, TRIALS, claim_sweep_folder, publish_text
from recsys_seq.tune.interrupt import StudyInterrupted, stop_on_sigint
from recsys_seq.tune.objective import Objective, trial_config
from recsys_seq.tune.plots import plot_plan, save_plots
from recsys_seq.tune.space import CategoricalParam, Param, as_overrides, parse_space, space_as_plain
from recsys_seq.tune.study import (
    FINISHED,
    TuneOptions,
    count,
    fail_running,
    load_study,
    open_storage,
    shown_url,
    storage_url,
    tune_options,
    work,
)
from recsys_seq.tune.summary import best_yaml, interrupt_report, summary

OWN_KEYS = ("tune", "search")  # the command's own options; every other override is a trial's


def train_overrides(overrides: Sequence[str]) -> list[str]:
    """The command line's overrides that every trial's recsys-train gets (all but ``tune.*``
    and ``search=...``), as they were typed."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    return [
        text
        for text, override in zip(overrides, parsed, strict=True)
        if override.key_or_group.split(".")[0] not in OWN_KEYS
    ]


def check_space(space: dict[str, Param], overrides: Sequence[str]) -> None:
    """Compose recsys-train's config with the overrides and each parameter's first value, so
    that a key recsys-train does not have fails before the study starts."""
    first = {
        name: param.choices[0] if isinstance(param, CategoricalParam) else param.low
        for name, param in space.items()
    }
    trial_config([*overrides, *as_overrides(first)], Path(TRIALS))


def make_sampler(values: dict[str, Any] | None, drawn: int) -> optuna.samplers.BaseSampler | None:
    """``tune.sampler`` (a class of the fixed table of Optuna's samplers); a seeded one is
    seeded with ``seed + drawn`` (the trials the study already has), so a resumed study draws
    new values instead of its first ones again."""
    if not values:
        return None
    if values.get("seed") is not None:
        values = {**values, "seed": int(values["seed"]) + drawn}
    return make("tune.sampler", values, optuna.samplers.BaseSampler)


def opening_line(study: optuna.Study, options: TuneOptions, url: str, sweep_dir: Path) -> str:
    """What the command says once the study is open: its trials so far, those queued to run
    first (a trial Ctrl-C stopped, a killed trial's retry) and where the run folders go."""
    queued = count(study, (TrialState.WAITING,))
    return (
        f"Study {options.study_name} ({shown_url(url)}): {count(study, FINISHED)} of "
        f"{options.n_trials} trials finished"
        + (f", {queued} queued to run first" if queued else "")
        + f"; each trial's run folder: {sweep_dir / TRIALS}/<n>"
    )


def tune(cfg: DictConfig, overrides: Sequence[str], command: str) -> optuna.Study:
    """Run (or resume) the study of ``cfg`` (``conf/tune.yaml`` composed) until it has
    ``tune.n_trials`` finished trials, then publish its summary, ``best.yaml`` and plots.

    Args:
        cfg: the command's config.
        overrides: the command line's overrides (Hydra's task overrides).
        command: the command line as typed, which resumes the study after Ctrl-C.

    Raises:
        StudyInterrupted: Ctrl-C, once the study was open: the interrupted trial re-queued,
            the summary files published, the report to print.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the trials print their own lines
    options = tune_options(configs.plain(cfg.tune))
    space = parse_space((configs.plain(cfg.get("search")) or {}).get("params"))
    metric = str(cfg.optimized_metric)
    base = train_overrides(overrides)
    check_space(space, base)
    make_sampler(options.sampler, 0)  # a sampler that cannot be made fails before any folder
    sweep_dir = claim_sweep_folder(options.sweep_dir)
    url = storage_url(options, sweep_dir)
    made_with = {"overrides": sorted(base), "space": space_as_plain(space), "metric": metric}
    study = load_study(open_storage(url, options), options.study_name, made_with)
    study.sampler = make_sampler(options.sampler, len(study.trials)) or study.sampler
    if options.fail_running:
        for number in fail_running(study, options.max_retry):
            print(f"trial {number}  marked failed (tune.fail_running=true); run again")
    print(opening_line(study, options, url, sweep_dir), flush=True)
    key = best_key(metric)
    with stop_on_sigint() as stop:
        objective = Objective(space, base, sweep_dir, metric, stop)
        interrupted = work(
            study, objective, options.n_trials, poll_seconds=options.heartbeat_interval, stop=stop
        )
        stopped = stop.requested  # read now: Ctrl-C while writing the results of a
        # complete study leaves it complete
        text, written = publish_results(study, sweep_dir, key, shown_url(url), base)
        if stopped:
            where = f"the database {shown_url(url)}; summary.md and trials/<n>/ in {sweep_dir}"
            report = interrupt_report(study, key, options.n_trials, interrupted, where, command)
            raise StudyInterrupted(report)
        print("\n" + text)
        for path in written:
            print(f"Wrote {path}")
    return study


def publish_results(
    study: optuna.Study, sweep_dir: Path, metric: str, storage: str, base: Sequence[str]
) -> tuple[str, list[Path]]:
    """Publish ``summary.md``, ``best.yaml`` (once a trial has completed) and the plots the
    completed trials allow, each file atomically; returns the summary and the files written.
    """
    plan = plot_plan(study)
    text = summary(study, metric, storage, base, plan)
    written = [publish_text(sweep_dir, SUMMARY, text)]
    best = best_yaml(study, metric, base)
    if best is not None:
        written.append(publish_text(sweep_dir, BEST, best))
    drawn = [name for name, missing in plan.items() if missing is None]
    return text, written + save_plots(study, sweep_dir, metric, drawn)
