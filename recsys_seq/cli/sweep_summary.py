"""A Hydra callback that ends a multirun (``recsys-train -m model=sasrec,gru``) with one table
of its jobs, printed and written as ``<sweep dir>/summary.md``.

The table is recsys-report's (:mod:`recsys_seq.report`: each job's overrides, test metrics,
best validation value of its optimised metric, training time), read from the jobs' run
folders, and the best job is named under it. Registered in ``conf/hydra/default.yaml``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from recsys_seq.core.errors import UserError
from recsys_seq.core.publish import register_kind, write_text
from recsys_seq.core.run_folders import METRICS_FILE
from recsys_seq.optimized_metric import best_key

SUMMARY = "summary.md"
SWEEP_SUMMARY = "sweep_summary"  # the artifact kind of summary.md
HEADING = "# Sweep "  # the first line of every summary.md this module writes


def _is_sweep_summary(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as file:
            return file.readline().startswith(HEADING)
    except (OSError, UnicodeDecodeError):
        return False


register_kind(SWEEP_SUMMARY, _is_sweep_summary)


def sweep_summary(sweep_dir: Path) -> str:
    """The jobs of the sweep folder as markdown: the report's table, the best job, and the
    jobs that left no results.

    Raises:
        UserError: no job of the sweep left results that can be read.
    """
    from recsys_seq.report.runs import load_runs  # torch-free, but polars: only when used
    from recsys_seq.report.table import markdown, table

    runs = load_runs(sweep_dir, include_debug=True)
    lines = [f"{HEADING}{sweep_dir}", "", markdown(table(runs))]
    scored = [r for r in runs if isinstance(_best_value(r), int | float)]
    if scored:
        best = max(scored, key=_best_value)
        shared = set.intersection(*(set(r.overrides) for r in runs))
        own = " ".join(o for o in best.overrides if o not in shared) or "no own overrides"
        lines += [
            "",
            f"Best: job {best.name} ({own}), {best.metric} best {_best_value(best):.4f}.",
        ]
    jobs = sorted(
        (p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    missing = [p.name for p in jobs if not (p / METRICS_FILE).exists()]
    if missing:
        lines += ["", f"No results from job(s) {', '.join(missing)} (failed or still running)."]
    return "\n".join(lines) + "\n"


def _best_value(run: Any) -> object:
    """The run's best validation value of the metric it optimised (``val/best_<name>``)."""
    return run.metrics.get(best_key(run.metric))


class SweepSummary(Callback):
    """Prints and writes ``summary.md`` when a multirun ends."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(os.path.abspath(config.hydra.sweep.dir))
        if not sweep_dir.is_dir():
            return
        try:
            text = sweep_summary(sweep_dir)
            path = write_text(sweep_dir / SUMMARY, text, SWEEP_SUMMARY)
        except UserError as error:  # a summary is a convenience: the jobs' own results stand
            print(f"recsys-train: no sweep summary: {error}", file=sys.stderr)
            return
        print("\n" + text + f"\nSummary: {path}")
