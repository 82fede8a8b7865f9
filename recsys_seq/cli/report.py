"""recsys-report: one table and a few plots across the runs under a folder.

    recsys-report folder=outputs/train/multiruns/<date>_<time>     # a sweep
    recsys-report folder=outputs/train/runs/<date>_<time>          # one run
    recsys-report folder=outputs/train include_debug=true          # everything below it

A Hydra app like the other commands (``conf/report.yaml``), which writes nothing but its
report: no run folder, no ``.hydra/``, no log file. A run folder is any folder holding
``metrics.json`` and ``.hydra/config.yaml`` (what recsys-train and recsys-eval write; an
older run's ``config.yaml`` is read too); a sweep folder holds numbered run folders, each with
the Hydra overrides that made it in ``.hydra/overrides.yaml``. Debug runs (``debug=...``,
``trainer.fast_dev_run``, ``trainer.limit_*_batches``: measured on a few batches) are left
out, with one line saying how many, unless ``include_debug=true``. Writes one folder
``report/`` next to the runs, published whole (a re-run replaces it; a ``report`` folder
recsys-report did not write is refused):

* ``report/report.csv``: one row per run: folder, model, dataset, overrides, optimised
  metric, why it is a debug run, its best validation value, every metric.
* ``report/report.md``: the same table as markdown (also printed), key metrics only: the test
  values of the metric the runs optimised (``optimized_metric``) and of HR at the same k.
* ``report/metrics.png``: those test metrics per run, one panel per dataset (each its own
  y-axis), the popularity baseline as dashed reference lines.
* ``report/val_curves.png``: per epoch, the validation metric each run optimised (its best
  epoch starred, popularity's value dashed) and the mean training loss, from its CSV,
  TensorBoard or MLflow log (:mod:`recsys_seq.report.curves`), one row per dataset.
* ``report/length_histogram_<dataset>.png``: each dataset's length histogram, copied from the
  prepared dataset folder (``data.path``).

Run labels in the plots show only the overrides that differ between the runs of a panel; the
ones all its runs share go into the panel's title, the ones every run shares into the figure's.

Run folders may come from anyone, so their files are read as plain data only: YAML with
``yaml.safe_load`` (no tags, no objects; interpolations stay unresolved strings), JSON with
``json``; a ``_target_`` in a config is read as a name, never imported or called. A run folder
that cannot be read as a run (a file that is not JSON/YAML, not the expected shape, a metric
that is not a number, a file that cannot be opened) is skipped with one warning line naming it
and the reason, and the rest are reported; with no readable run left, the command stops with
one error paragraph and exit status 2, having written nothing. Everything is read and checked
before the first output is written.

This module is the command: it reads the runs (:mod:`recsys_seq.report.runs`), builds the table
(:mod:`recsys_seq.report.table`) and the images (:mod:`recsys_seq.report.plots`), and publishes
them as the one ``report/`` folder. :class:`~recsys_seq.report.runs.Run` and
``_distinct_dataset_names`` stay importable from here, where tests/test_cli_guards.py finds them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import hydra
import matplotlib
from omegaconf import DictConfig, OmegaConf

from recsys_seq.core import conf
from recsys_seq.core.errors import exit_on_user_error, exit_with, run_command
from recsys_seq.core.options import OptionError, checked
from recsys_seq.core.publish import publishing, register_folder_kind
from recsys_seq.report.plots import copy_histograms, plot_curves, plot_metrics
from recsys_seq.report.runs import Run, _distinct_dataset_names, load_runs  # noqa: F401
from recsys_seq.report.table import markdown, table

REPORT_DIR = "report"
REPORT = "report"  # the artifact kind (recsys_seq.core.publish)
register_folder_kind(
    REPORT, r"report\.(csv|md)|metrics\.png|val_curves\.png|length_histogram_.+\.png"
)
REPORT_CSV = "report.csv"


@dataclass(frozen=True)
class ReportOptions:
    """The command's options (``conf/report.yaml``), checked before any work."""

    folder: str
    include_debug: bool = False


def report(folder: str | Path, include_debug: bool = False) -> dict[str, object]:
    """Build the table and plots for the runs under ``folder`` (debug runs too with
    ``include_debug``); returns what was written."""
    folder = Path(folder)
    runs = load_runs(folder, include_debug=include_debug)
    frame = table(runs)
    text = markdown(frame)
    out = folder / REPORT_DIR
    # one folder, published whole: a report is never half-written, and a folder named
    # "report" that recsys-report did not write is refused, not replaced
    # labels come from the runs' files: a "$" in one must not start (failing) mathtext
    with (
        publishing(out, REPORT, folder=True) as tmp,
        matplotlib.rc_context({"text.parse_math": False}),
    ):
        frame.write_csv(tmp / REPORT_CSV)
        (tmp / "report.md").write_text(text + "\n")
        plots = [
            plot_metrics(runs, tmp / "metrics.png"),
            plot_curves(runs, tmp / "val_curves.png"),
            *copy_histograms(runs, tmp),
        ]
    return {
        "runs": runs,
        "table": frame,
        "markdown": text,
        "csv": out / REPORT_CSV,
        "plots": [out / p.name for p in plots if p is not None],
    }


def report_options(cfg: DictConfig) -> ReportOptions:
    """The options checked; ``folder`` left at ``???`` counts as not given. (Read here rather
    than with the training commands' helper, which would import torch for a report.)"""
    values = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    if values.get("folder") in (None, "???", ""):
        raise OptionError(
            "folder is required: recsys-report folder=<a run folder, a sweep folder or a parent>."
        )
    return checked(ReportOptions, {k: v for k, v in values.items() if v != "???"}, "")


# conf.CONF_SEARCH_PATH is recsys_seq.configs.CONF_SEARCH_PATH, found without importing torch
@hydra.main(version_base="1.3", config_path=conf.CONF_SEARCH_PATH, config_name="report")
@exit_on_user_error("recsys-report")
def _main(cfg: DictConfig) -> None:
    options = report_options(cfg)
    result = report(options.folder, include_debug=options.include_debug)
    print(result["markdown"])
    print(f"\n{len(result['runs'])} runs. Table: {result['csv']}")
    for plot in result["plots"]:
        print(f"Plot: {plot}")


def main() -> None:
    bare = [a for a in sys.argv[1:] if "=" not in a and not a.startswith("-")]
    if bare:  # the command's older form, `recsys-report <folder>`
        exit_with("recsys-report", OptionError(f"give the folder as folder={bare[0]}."))
    run_command(_main, "recsys-report")


if __name__ == "__main__":
    main()
