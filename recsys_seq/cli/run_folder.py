"""A Hydra callback that checks where a command will write before Hydra writes anything.

Hydra creates ``hydra.run.dir`` and writes ``.hydra/`` there before the task starts, so the
task's own check (:func:`recsys_seq.core.publish.claim_run_folder`) would come too late for
``hydra.run.dir=<a folder with the user's files>``, ``hydra.run.dir=.`` or
``hydra.run.dir=<the folder of the checkpoint to evaluate>``. The guard knows, from its
parameters in ``conf/hydra/default.yaml`` (and ``file_output.yaml``), which options name the
command's inputs and outputs, and checks the run folder and the outputs against them:

* the run folder, whenever Hydra or the command writes into it, by the run-folder rule
  (:func:`recsys_seq.core.publish.check_run_folder`: never the working directory or a folder above
  it, an input or a folder holding or inside one, a user's files or another task's run);
* every output the options name, by the location rule
  (:func:`recsys_seq.core.publish.check_location`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from recsys_seq.core.errors import UserError, exit_with, on_user_error
from recsys_seq.core.publish import (
    MARKER_FILE,
    RUN,
    OutputRefused,
    check_location,
    check_run_folder,
    discard_unclaimed_run_folder,
    missing_parents,
)


class RunFolderGuard(Callback):
    """Refuses a run folder or an output that would overwrite a user's file, an input or
    another run's record; removes the folder Hydra made for a run that a user error stopped
    before it started, and the folders Hydra made above it once empty (so refused commands
    leave nothing).

    Args:
        inputs: the options (dotted keys) that name files or folders the command reads.
        outputs: the options that name what the command writes besides its run folder.
        result: the option naming the command's one result file, for commands whose result
            goes into the run folder when that option is null; None for the others.
    """

    def __init__(
        self, inputs: Sequence[str] = (), outputs: Sequence[str] = (), result: str | None = None
    ) -> None:
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.result = result

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        inputs = self._check_outputs(config)
        if not self._writes_run_folder(config):
            return  # a command that writes only the outputs it names: no run folder at all
        task = str(config.task_name)
        folder = _checked(lambda: check_run_folder(config.hydra.run.dir, inputs, task=task))
        if not folder.exists():
            made_above = missing_parents(folder)  # what Hydra is about to make for the run
            on_user_error(lambda: discard_unclaimed_run_folder(folder, made_above))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A sweep folder holds Hydra's ``multirun.yaml``, numbered run folders and what
        sweeps and reports write; anything else is a user's."""
        inputs = self._check_outputs(config)
        sweep = _checked(lambda: check_location(config.hydra.sweep.dir, RUN, True, inputs))
        if not sweep.is_dir():
            return
        task = str(config.task_name)
        for entry in sweep.iterdir():
            if entry.is_dir() and entry.name.isdigit():
                _checked(lambda entry=entry: check_run_folder(entry, inputs, task=task))
            elif entry.name not in SWEEP_FILES:
                exit_with(
                    None,
                    OutputRefused(
                        f"Sweep folder {sweep} already holds {entry.name}, which recsys-seq did "
                        "not write; it is left untouched. Pick a new folder with "
                        "hydra.sweep.dir=<folder>."
                    ),
                )

    def _check_outputs(self, config: DictConfig) -> list[Path]:
        """The command's inputs, after checking every output it names against them."""
        inputs = [Path(str(value)) for value in _given(config, self.inputs)]
        for output in _given(config, self.outputs):
            _checked(lambda output=output: check_location(str(output), RUN, False, inputs))
        return inputs

    def _writes_run_folder(self, config: DictConfig) -> bool:
        """Hydra writes its record (``.hydra/``) there, or the command its result."""
        hydra = config.hydra
        if hydra.output_subdir is not None:
            return True
        unnamed = self.result is not None and OmegaConf.select(config, self.result) is None
        return unnamed or str(hydra.run.dir) != "."


SWEEP_FILES = ("multirun.yaml", "summary.md", "report", MARKER_FILE)


def _given(config: DictConfig, keys: Sequence[str]) -> list[Any]:
    """The values of the options ``keys`` that the command has and that are set."""
    values = (OmegaConf.select(config, key, throw_on_missing=False) for key in keys)
    return [value for value in values if value is not None]


def _checked(check: Callable[[], Path]) -> Path:
    try:
        return check()
    except UserError as error:  # Hydra would only warn about an exception from here
        exit_with(None, error)
