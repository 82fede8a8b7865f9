"""recsys-report: one table and a few plots across the runs under a folder.

    recsys-report outputs/train/multiruns/<date>_<time>     # a sweep
    recsys-report outputs/train/runs/<date>_<time>          # one run
    recsys-report outputs/train                             # everything below it

A run folder is any folder holding ``metrics.json`` and ``config.yaml`` (what recsys-train and
recsys-eval write); a sweep folder holds numbered run folders, each with the Hydra overrides
that made it in ``.hydra/overrides.yaml``. Writes one folder ``report/`` next to the runs,
published whole (a re-run replaces it; a ``report`` folder recsys-report did not write is
refused):

* ``report/report.csv``: one row per run: folder, model, dataset, overrides, every metric.
* ``report/report.md``: the same table as markdown (also printed), key metrics only.
* ``report/metrics.png``: test NDCG@10 and HR@10 of each run, one panel per dataset, the
  popularity baseline as a reference line.
* ``report/val_curves.png``: per epoch, the validation metric each run optimised
  (``model.monitor``, default ndcg@10; from ``csv/metrics.csv``), one line per run.
* ``report/length_histogram_<dataset>.png``: each dataset's length histogram, copied from the
  prepared dataset folder (``data.path``).

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

import argparse
from collections.abc import Sequence
from pathlib import Path

import matplotlib

from data_prep.errors import exit_on_user_error
from data_prep.publish import publishing, register_folder_kind
from recsys_seq.report.plots import copy_histograms, plot_curves, plot_metrics
from recsys_seq.report.runs import Run, _distinct_dataset_names, load_runs  # noqa: F401
from recsys_seq.report.table import markdown, table

REPORT_DIR = "report"
REPORT = "report"  # the artifact kind (data_prep.publish)
register_folder_kind(
    REPORT, r"report\.(csv|md)|metrics\.png|val_curves\.png|length_histogram_.+\.png"
)
REPORT_CSV = "report.csv"


def report(folder: str | Path) -> dict[str, object]:
    """Build the table and plots for the runs under ``folder``; returns what was written."""
    folder = Path(folder)
    runs = load_runs(folder)
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


@exit_on_user_error("recsys-report")
def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="recsys-report", description="Table and plots across the runs under a folder."
    )
    parser.add_argument("folder", type=Path, help="a run folder, a sweep folder, or any parent")
    args = parser.parse_args(argv)  # a usage error exits 2 (argparse's own status)
    result = report(args.folder)
    print(result["markdown"])
    print(f"\n{len(result['runs'])} runs. Table: {result['csv']}")
    for plot in result["plots"]:
        print(f"Plot: {plot}")


if __name__ == "__main__":
    main()
