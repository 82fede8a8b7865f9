"""Run folders: the folder a training or evaluation run grows in (checkpoints, loggers,
``metrics.json``, Hydra's ``.hydra/config.yaml``), claimed for the project before the run
writes into it.

A run folder cannot be published whole like other outputs (:mod:`recsys_seq.core.publish`): it grows
while the run lasts and Hydra creates it before the project's code starts. So it is *claimed*:
:func:`check_run_folder` accepts a folder only when it is new, empty, holds only what Hydra
writes for a run, or is a marked run folder of the same task (``train``, ``eval``, ...)
holding only what runs write, and :func:`claim_run_folder` then writes the run marker, which
names the task: a run never replaces another task's record (its ``metrics.json`` and config).
Files published into a claimed folder are the project's (the ``run_file`` kind,
:data:`RUN_FILE`), so a rerun may replace them.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from recsys_seq.core.artifacts import MARKER_FILE, read_marker, register_kind
from recsys_seq.core.refusals import OutputRefused, check_location, output_errors
from recsys_seq.core.temporaries import tag

RUN = "run"
METRICS_FILE = "metrics.json"  # a run's results, flat <stage>/<metric> keys
CONFIG_FILE = "config.yaml"  # the resolved config older runs wrote (now: .hydra/config.yaml)
# what Hydra itself puts into a run folder before the project's code starts
_HYDRA_ENTRIES = re.compile(r"^(\.hydra|[^/]+\.log)$")
# everything a run writes: Hydra's files, checkpoints, loggers, results, temporaries and the
# parts of a result being gathered
_RUN_ENTRIES = re.compile(
    r"^(\.hydra|[^/]+\.log|checkpoints|csv|tensorboard|mlflow|metrics\.json|config\.yaml|"
    r"report|recommendations\.parquet|model\.pt2|retriever(_fold\d+)?|\.recsys-seq\.json|"
    r"\..+\.tmp-.+|\..+\.parts)$"
)


# the marker a concurrent claim of the same folder is writing (see mark_growing_folder)
MARKER_TEMPORARY = re.compile(rf"^\.{re.escape(MARKER_FILE)}\.tmp-.+$")


def check_run_folder(folder: str | Path, inputs: Iterable[str | Path] = (), *, task: str) -> Path:
    """The absolute run folder if the ``task`` run may use it: new, empty, holding only what
    Hydra writes for a run, or a run folder of the same task holding only what runs write (a
    rerun: a resumed training, an evaluation done again); never the working directory or a
    folder above it, an input, a folder holding one or inside an input folder, nor another
    task's run (its results and config would be replaced). Else :class:`OutputRefused`."""
    folder = check_location(folder, RUN, True, inputs)
    if folder.exists() and not folder.is_dir():
        raise OutputRefused(f"Run folder {folder} is a file; pick a new folder.")
    marker = read_marker(folder) if folder.is_dir() else None
    run = marker is not None and marker.get("artifact") == RUN
    allowed = _RUN_ENTRIES if run else _HYDRA_ENTRIES
    if folder.is_dir() and not all(allowed.match(e.name) for e in folder.iterdir()):
        raise OutputRefused(
            f"Run folder {folder} already holds files that recsys-seq did not write; they are "
            "left untouched. Pick a new folder with hydra.run.dir=<folder>."
        )
    if run and marker.get("task") != task:
        raise OutputRefused(
            f"Run folder {folder} holds another run's record (its results and config; task "
            f"{marker.get('task') or 'unnamed'}), which this {task} run would replace; it is "
            "left untouched. Pick a new folder with hydra.run.dir=<folder>."
        )
    return folder


def claim_run_folder(folder: str | Path, inputs: Iterable[str | Path] = (), *, task: str) -> Path:
    """Make ``folder`` the run folder of a ``task`` run (checkpoints, metrics, logs grow in
    it): :func:`check_run_folder`, then the marker, which names the task."""
    folder = check_run_folder(folder, inputs, task=task)
    if read_marker(folder) is None:
        mark_growing_folder(folder, RUN, task=task)
    return folder


def mark_growing_folder(folder: Path, kind: str, **facts: str) -> None:
    """Create ``folder`` and mark it (atomically) as the project's ``kind``, with ``facts``
    about it (a run's task): for folders that grow while a job runs, such as a run folder or
    a study's sweep folder."""
    with output_errors(folder):
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{MARKER_FILE}.tmp-{tag()}"
        tmp.write_text(json.dumps({"artifact": kind, **facts}) + "\n")
        os.replace(tmp, folder / MARKER_FILE)


def discard_unclaimed_run_folder(folder: Path, made_above: Sequence[Path] = ()) -> None:
    """Remove a run folder that holds only what Hydra wrote (the run never claimed it), then
    the folders of ``made_above`` (innermost first: those Hydra made above it for this run,
    ``outputs/eval/runs``) that are left empty; one that is not stops the walk."""
    unclaimed = folder.is_dir() and read_marker(folder) is None
    if not (unclaimed and all(_HYDRA_ENTRIES.match(e.name) for e in folder.iterdir())):
        return
    shutil.rmtree(folder, ignore_errors=True)
    for parent in made_above:
        try:
            parent.rmdir()  # only ever an empty folder
        except OSError:
            return


def missing_parents(folder: Path) -> list[Path]:
    """The folders above ``folder`` that do not exist yet, innermost first."""
    return list(itertools.takewhile(lambda p: not p.exists(), folder.absolute().parents))


def in_run_folder(path: Path) -> bool:
    """Files of a run folder are the project's: ``metrics.json``, checkpoints, plots."""
    marker = read_marker(path.parent)
    return marker is not None and marker.get("artifact") == RUN


RUN_FILE = "run_file"
register_kind(RUN_FILE, in_run_folder)
