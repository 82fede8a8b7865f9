"""Optuna's plots of a study as PNG files in its sweep folder (matplotlib's Agg backend, no
display): the optimisation history, the parallel coordinates of the values and, once two
completed trials differ in two or more values, the parameters' importances.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed

import matplotlib.pyplot as plt  # noqa: E402
import optuna  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from optuna.exceptions import ExperimentalWarning  # noqa: E402
from optuna.importance import PedAnovaImportanceEvaluator  # noqa: E402
from optuna.trial import TrialState  # noqa: E402
from optuna.visualization import matplotlib as optuna_plots  # noqa: E402

from recsys_seq.core.publish import publishing  # noqa: E402
from recsys_seq.tune.folder import HISTORY, IMPORTANCES, PARALLEL, STUDY_FILE  # noqa: E402


def varying_params(study: optuna.Study) -> list[str]:
    """The parameters that took more than one value among the completed trials."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    names = dict.fromkeys(name for t in done for name in t.params)
    return [n for n in names if len({repr(t.params.get(n)) for t in done}) > 1]


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
    axes = optuna_plots.plot_param_importances(
        study, evaluator=PedAnovaImportanceEvaluator(), target_name=metric
    )
    if axes.get_legend() is not None:
        axes.get_legend().remove()
    return axes


def save_plots(study: optuna.Study, folder: Path, metric: str) -> list[Path]:
    """Draw the plots the study's completed trials allow; returns the files written."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not done:
        return []
    plots: dict[str, Callable[[optuna.Study, str], Axes]] = {
        HISTORY: _history,
        PARALLEL: _parallel,
    }
    if len(done) >= 2 and len(varying_params(study)) >= 2:
        plots[IMPORTANCES] = _importances
    written = []
    for name, draw in plots.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)  # optuna's matplotlib module
            # a parameter that took one value gets a flat axis; matplotlib says so
            warnings.filterwarnings("ignore", message="Attempting to set identical low and high")
            figure = draw(study, metric).figure
        with publishing(folder / name, STUDY_FILE, folder=False) as tmp:
            figure.savefig(tmp, dpi=120, bbox_inches="tight")
        plt.close(figure)
        written.append(folder / name)
    return written
