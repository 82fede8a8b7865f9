"""A Hydra callback that checks the run folder before Hydra writes into it.

Hydra creates ``hydra.run.dir`` and writes ``.hydra/`` and a log file there before the task
starts, so the task's own check (:func:`data_prep.publish.claim_run_folder`) would come too
late for ``hydra.run.dir=<a folder with the user's files>``. Registered in
``conf/hydra/default.yaml``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from data_prep.errors import UserError, exit_with, on_user_error
from data_prep.publish import (
    MARKER_FILE,
    OutputRefused,
    check_run_folder,
    discard_unclaimed_run_folder,
)


class RunFolderGuard(Callback):
    """Refuses a run folder holding a user's files; removes the folder Hydra made for a run
    that a user error stopped before it started (so refused commands leave nothing)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if str(config.hydra.run.dir) == ".":
            return  # a command that writes one named output: no run folder at all
        folder = _checked(config.hydra.run.dir)
        if not folder.exists():
            on_user_error(lambda: discard_unclaimed_run_folder(folder))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A sweep folder holds Hydra's ``multirun.yaml``, numbered run folders and what
        sweeps and reports write; anything else is a user's."""
        sweep = Path(os.path.abspath(config.hydra.sweep.dir))
        if not sweep.is_dir():
            return
        for entry in sweep.iterdir():
            if entry.is_dir() and entry.name.isdigit():
                _checked(entry)
            elif entry.name not in SWEEP_FILES:
                exit_with(
                    None,
                    OutputRefused(
                        f"Sweep folder {sweep} already holds {entry.name}, which recsys-seq did "
                        "not write; it is left untouched. Pick a new folder with "
                        "hydra.sweep.dir=<folder>."
                    ),
                )


SWEEP_FILES = ("multirun.yaml", "summary.md", "report", MARKER_FILE)


def _checked(folder: str | Path) -> Path:
    try:
        return check_run_folder(folder)
    except UserError as error:  # Hydra would only warn about an exception from here
        exit_with(None, error)
