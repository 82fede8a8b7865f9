"""A Hydra callback that checks the run folder before Hydra writes into it.

Hydra creates ``hydra.run.dir`` and writes ``.hydra/`` and a log file there before the task
starts, so the task's own check (:func:`data_prep.publish.claim_run_folder`) would come too
late for ``hydra.run.dir=<a folder with the user's files>``. Registered in
``conf/hydra/default.yaml``.
"""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from data_prep.errors import UserError, exit_with, on_user_error
from data_prep.publish import check_run_folder, discard_unclaimed_run_folder


class RunFolderGuard(Callback):
    """Refuses a run folder holding a user's files; removes the folder Hydra made for a run
    that a user error stopped before it started (so refused commands leave nothing)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.hydra.output_subdir is None:
            return  # a command that writes one named output: Hydra writes nothing of its own
        try:
            folder = check_run_folder(config.hydra.run.dir)
        except UserError as error:  # Hydra would only warn about an exception from here
            exit_with(None, error)
        if not folder.exists():
            on_user_error(lambda: discard_unclaimed_run_folder(folder))
