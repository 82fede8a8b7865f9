"""What people read at the end of a study: every trial as one markdown table, then the best
trial (its overrides as a recsys-train command line, its metrics) and the plots drawn or not
yet, and ``best.yaml``; after Ctrl-C, a short report of where the study stands instead.

Everything comes from the study's database (the trials' user attributes), so any worker, on
any machine, writes the same summary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from omegaconf import OmegaConf
from optuna.trial import FrozenTrial, TrialState

from recsys_seq.core.tables import Column, markdown
from recsys_seq.tune.interrupt import INTERRUPTED
from recsys_seq.tune.space import rounded
from recsys_seq.tune.study import FINISHED

# the best trial's metrics shown: its best validation values, test metrics and fit time
SHOWN_PREFIXES = ("val/best_", "test/", "fit/")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _metric_order(name: str) -> tuple:
    """By group, metric, then cut-off as a number (``hr@5`` before ``hr@10``)."""
    group, _, metric = name.rpartition("/")
    base, _, k = metric.partition("@")
    return (group, base, int(k) if k.isdigit() else 0)


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return max(done, key=lambda t: t.value, default=None)


def state(trial: FrozenTrial) -> str:
    """The trial's state as people read it: Optuna's, but INTERRUPTED for a trial Ctrl-C
    stopped (a FAIL to Optuna, whose values were queued again)."""
    return "INTERRUPTED" if trial.user_attrs.get(INTERRUPTED) else trial.state.name


def summary(
    study: optuna.Study,
    metric: str,
    storage: str,
    base_overrides: Sequence[str],
    plots: Mapping[str, str | None],
) -> str:
    """The study as markdown: counts, every trial (number, state, value, seconds, values; the
    best one starred), the best trial's command line and metrics, and which plots were drawn
    (``plots``: each file and why it was not drawn, None when it was)."""
    return "\n".join([*_trials_and_best(study, metric, storage, base_overrides), *_plots(plots)])


def _plots(plots: Mapping[str, str | None]) -> list[str]:
    """The plots section: those drawn, then those not yet and how many trials they need."""
    drawn = [f"- {name}" for name, missing in plots.items() if missing is None]
    skipped = [f"- {name}: not drawn, {missing}" for name, missing in plots.items() if missing]
    return ["", "## Plots", "", *drawn, *skipped, ""]


def _trials_and_best(
    study: optuna.Study, metric: str, storage: str, base_overrides: Sequence[str]
) -> list[str]:
    trials = study.get_trials(deepcopy=False)
    names = list(dict.fromkeys(name for t in trials for name in t.params))
    finished = sum(t.state in FINISHED for t in trials)
    best = best_trial(study)
    columns = [Column("trial", right=True), Column("state"), Column(metric, right=True)]
    columns += [Column("seconds", right=True), *(Column(name, right=True) for name in names)]
    rows = [
        [
            f"{t.number}*" if best is not None and t.number == best.number else t.number,
            state(t),
            f"{t.value:.4f}" if t.value is not None else None,
            f"{t.user_attrs['seconds']:.1f}" if "seconds" in t.user_attrs else None,
            *(t.params.get(name) for name in names),
        ]
        for t in trials
    ]
    lines = [
        f"# Study {study.study_name}",
        "",
        f"{finished} finished trials of {len(trials)} ({storage}); maximising {metric}.",
        "",
        markdown(columns, [[_cell(v) for v in row] for row in rows]),
    ]
    if best is None:
        return [*lines, "", "No trial has completed yet."]
    metrics = best.user_attrs.get("metrics", {})
    shown = sorted((k for k in metrics if k.startswith(SHOWN_PREFIXES)), key=_metric_order)
    lines += [
        "",
        f"## Best: trial {best.number}, {metric} = {best.value:.4f}",
        "",
        f"Run folder: `{best.user_attrs.get('run_dir', '-')}`. Train it again with:",
        "",
        "    " + " ".join(["recsys-train", *best_overrides(best, base_overrides)]),
        "",
        markdown(
            [Column("metric"), Column("value", right=True)],
            [[k, _metric(k, metrics[k])] for k in shown],
        ),
    ]
    return lines


def _metric(name: str, value: float) -> str:
    return f"{value:.4f}" if name.startswith(("val/", "test/")) else _cell(value)


def best_overrides(trial: FrozenTrial, base_overrides: Sequence[str]) -> list[str]:
    """The recsys-train overrides of ``trial``: the study's own, then the trial's values."""
    return [*base_overrides, *trial.user_attrs.get("overrides", [])]


def best_yaml(study: optuna.Study, metric: str, base_overrides: Sequence[str]) -> str | None:
    """``best.yaml``: the best trial's values and its full recsys-train overrides; None while
    no trial has completed."""
    best = best_trial(study)
    if best is None:
        return None
    content = {
        "study": study.study_name,
        "trial": best.number,
        "metric": metric,
        "value": best.value,
        "params": {name: rounded(value) for name, value in best.params.items()},
        "overrides": best_overrides(best, base_overrides),
    }
    header = (
        f"# The best trial of recsys-tune's study {study.study_name}; train it again with\n"
        f"#   recsys-train {' '.join(content['overrides'])}\n"
    )
    return header + OmegaConf.to_yaml(OmegaConf.create(content))


def state_counts(study: optuna.Study) -> Counter[str]:
    """How many trials are in each state, as :func:`state` names them (0 for any other)."""
    return Counter(state(t) for t in study.get_trials(deepcopy=False))


def interrupt_report(
    study: optuna.Study,
    metric: str,
    wanted: int,
    interrupted: int | None,
    where: str,
    command: str,
) -> str:
    """What recsys-tune prints after Ctrl-C: the trials so far, the best one, where the study
    lives and the command that resumes it.

    Args:
        study: the study.
        metric: the key trials are scored by (``val/best_ndcg@10``).
        wanted: ``tune.n_trials``.
        interrupted: the trial Ctrl-C stopped (its values queued again); None when Ctrl-C
            came between trials.
        where: the study's database and folder, as said to people.
        command: the command line as typed.
    """
    counts = state_counts(study)
    stopped = (
        f"trial {interrupted} was stopped and its values queued again"
        if interrupted is not None
        else "no trial was running"
    )
    best = best_trial(study)
    best_lines = (
        [
            f"Best so far: trial {best.number}, {metric} = {best.value:.4f}, with",
            "  " + "  ".join(best.user_attrs.get("overrides", [])),
        ]
        if best is not None
        else ["Best so far: none, no trial has completed."]
    )
    first = "; the re-queued trial runs first" if interrupted is not None else ""
    return "\n".join(
        [
            "",
            f"recsys-tune: interrupted (Ctrl-C); {stopped}.",
            f"Trials: {counts['COMPLETE']} complete, {counts['PRUNED']} pruned, "
            f"{counts['FAIL']} failed, of {wanted} wanted.",
            *best_lines,
            f"Study {study.study_name}: {where}.",
            f"Resume with the same command{first}:",
            f"  {command}",
        ]
    )
