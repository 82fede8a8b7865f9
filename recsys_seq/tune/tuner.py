"""recsys-tune from start to end: options checked, the sweep folder claimed, the study opened
(or resumed), worked until it has its trials, and summarised.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from recsys_seq import configs
from recsys_seq.core.objects import make
from recsys_seq.optimized_metric import best_key
from recsys_seq.tune.folder import BEST, SUMMARY, TRIALS, claim_sweep_folder, publish_text
from recsys_seq.tune.objective import Objective, trial_config
from recsys_seq.tune.plots import save_plots
from recsys_seq.tune.space import CategoricalParam, Param, as_overrides, parse_space, space_as_plain
from recsys_seq.tune.study import (
    FINISHED,
    count,
    fail_running,
    load_study,
    open_storage,
    shown_url,
    storage_url,
    tune_options,
    work,
)
from recsys_seq.tune.summary import best_yaml, summary

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


def tune(cfg: DictConfig, overrides: Sequence[str]) -> optuna.Study:
    """Run (or resume) the study of ``cfg`` (``conf/tune.yaml`` composed) until it has
    ``tune.n_trials`` finished trials, then publish its summary, ``best.yaml`` and plots.

    Args:
        cfg: the command's config.
        overrides: the command line's overrides (Hydra's task overrides).
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
    print(
        f"Study {options.study_name} ({shown_url(url)}): {count(study, FINISHED)} of "
        f"{options.n_trials} trials finished; each trial's run folder: {sweep_dir / TRIALS}/<n>",
        flush=True,
    )
    objective = Objective(space, base, sweep_dir, metric)
    work(study, objective, options.n_trials, poll_seconds=options.heartbeat_interval)
    key = best_key(metric)
    text = summary(study, key, shown_url(url), base)
    written = [publish_text(sweep_dir, SUMMARY, text)]
    best = best_yaml(study, key, base)
    if best is not None:
        written.append(publish_text(sweep_dir, BEST, best))
    written += save_plots(study, sweep_dir, key)
    print("\n" + text)
    for path in written:
        print(f"Wrote {path}")
    return study
