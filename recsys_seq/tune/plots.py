"""Optuna's plots of a study as PNG files in its sweep folder (matplotlib's Agg backend, no
display): the optimisation history, the parallel coordinates of the values and the
parameters' importances, each drawn only once the completed trials can say what it shows
(:data:`PLOTS`); the summary names the others and what they need.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed

import matplotlib.pyplot as plt  # noqa: E402
import optuna  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from optuna.exceptions import ExperimentalWarning  # noqa: E402
from optuna.importance import PedAnovaImportanceEvaluator  # noqa: E402
from optuna.trial import FrozenTrial, TrialState  # noqa: E402
from optuna.visualization import matplotlib as optuna_plots  # noqa: E402

from recsys_seq.core.publish import publishing  # noqa: E402
from recsys_seq.tune.folder import HISTORY, IMPORTANCES, PARALLEL, STUDY_FILE  # noqa: E402

# PED-ANOVA's importances compare the values of the best TOP_QUANTILE of the completed trials
# with those of all of them; TOP_TRIALS is the fewest trials that comparison can rest on
TOP_QUANTILE = 0.1
TOP_TRIALS = 2
TRIALS_PER_PARAM = 2


def varying_params(done: Sequence[FrozenTrial]) -> list[str]:
    """The parameters that took more than one value among the completed trials ``done``."""
    names = dict.fromkeys(name for t in done for name in t.params)
    return [n for n in names if len({repr(t.params.get(n)) for t in done}) > 1]


def importance_trials(n_params: int) -> int:
    """The completed trials the importances need for ``n_params`` searched parameters: 20, or
    2 per parameter in a space of more than 10.

    The best 10% must be two trials or more (0.1 n >= 2, so n >= 20). With 10 or fewer it is
    one trial, and a parameter's "importance" is only how far that trial's value lies from the
    others' (a spike against a spread, large for whatever the sampler happened to vary);
    Optuna's own minimum for a distribution is two trials too. Two per parameter keep a wide
    space (sasrec_recipe: 11) from being judged on fewer trials than it has dimensions.
    Optuna advises five in the best 10% (50 trials) for stable values; studies of 20 to 30
    trials are common, so that is left to whoever reads the plot.
    """
    return max(math.ceil(TOP_TRIALS / TOP_QUANTILE), TRIALS_PER_PARAM * n_params)


def _trials_needed(needed: int, done: Sequence[FrozenTrial]) -> str | None:
    """Why ``done`` is too few for a plot (None: it is enough)."""
    if len(done) >= needed:
        return None
    return f"needs {needed} completed trial{'s' if needed > 1 else ''}, has {len(done)}"


def _history_needs(done: Sequence[FrozenTrial]) -> str | None:
    """One point is already the true history."""
    return _trials_needed(1, done)


def _parallel_needs(done: Sequence[FrozenTrial]) -> str | None:
    """One trial is one line: flat axes and no relation between values and the metric."""
    return _trials_needed(2, done)


def _importances_needs(done: Sequence[FrozenTrial]) -> str | None:
    """Enough trials (:func:`importance_trials`), and two parameters that varied: the only one
    that varies always gets all the importance."""
    names = {name for t in done for name in t.params}
    too_few = _trials_needed(importance_trials(len(names)), done)
    if too_few is None and len(varying_params(done)) < 2:
        return "needs two or more parameters that took different values"
    return too_few


def _history(study: optuna.Study, metric: str) -> Axes:
    axes = optuna_plots.plot_optimization_history(study, target_name=metric)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # trial numbers
    return axes


def _parallel(study: optuna.Study, metric: str) -> Axes:
    """Optuna's parallel coordinates, with the parameters' full names (it cuts them to 17
    characters, which leaves ``model.encoder.num...`` twice), room for every axis, and a
    colour map whose worst trials are not white on its grey background."""
    axes = optuna_plots.plot_parallel_coordinate(study, target_name=metric)
    for lines in axes.collections:
        lines.set_cmap("viridis")  # its colour bar follows
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    names = [metric, *sorted({name for t in done for name in t.params})]  # optuna's order
    axes.set_xticks(range(len(names)), names, rotation=330, ha="left")
    axes.figure.set_size_inches(max(8.0, 1.9 * len(names)), 5.5)
    return axes


def _importances(study: optuna.Study, metric: str) -> Axes:
    """Optuna's importances without its one-entry legend (the study's one metric), which sat
    over the smallest bars."""
    evaluator = PedAnovaImportanceEvaluator(target_quantile=TOP_QUANTILE)
    axes = optuna_plots.plot_param_importances(study, evaluator=evaluator, target_name=metric)
    if axes.get_legend() is not None:
        axes.get_legend().remove()
    return axes


@dataclass(frozen=True)
class Plot:
    """One of Optuna's plots: its file, how it is drawn, and why the completed trials cannot
    support it yet (None: they can)."""

    name: str
    draw: Callable[[optuna.Study, str], Axes]
    needs: Callable[[Sequence[FrozenTrial]], str | None]


PLOTS = (
    Plot(HISTORY, _history, _history_needs),
    Plot(PARALLEL, _parallel, _parallel_needs),
    Plot(IMPORTANCES, _importances, _importances_needs),
)


def plot_plan(study: optuna.Study) -> dict[str, str | None]:
    """Each plot's file and why the study cannot have it yet (None: it is drawn). Decided once,
    so that the summary and the files agree while other workers add trials."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return {plot.name: plot.needs(done) for plot in PLOTS}


def save_plots(
    study: optuna.Study, folder: Path, metric: str, names: Collection[str]
) -> list[Path]:
    """Draw the plots ``names`` (those :func:`plot_plan` allows); returns the files written."""
    written = []
    for plot in (p for p in PLOTS if p.name in names):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)  # optuna's matplotlib module
            # a parameter that took one value gets a flat axis; matplotlib says so
            warnings.filterwarnings("ignore", message="Attempting to set identical low and high")
            figure = plot.draw(study, metric).figure
        with publishing(folder / plot.name, STUDY_FILE, folder=False) as tmp:
            figure.savefig(tmp, dpi=120, bbox_inches="tight")
        plt.close(figure)
        written.append(folder / plot.name)
    return written
