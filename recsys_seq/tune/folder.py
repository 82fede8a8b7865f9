"""The sweep folder of a study: claimed for recsys-tune before any trial, and the files it
publishes there.

``<sweep dir>/`` holds the study's database (``study.db`` with SQLite, the default), one run
folder per trial (``trials/<number>/``), ``summary.md``, ``best.yaml`` and the plots. It is the
same folder every time the same command runs, so that a re-run resumes the study; a folder
holding anything else is a user's and is refused, never written into.
"""

from __future__ import annotations

import re
from pathlib import Path

from recsys_seq.core.artifacts import MARKER_FILE, read_marker, register_kind
from recsys_seq.core.publish import OutputRefused, write_text
from recsys_seq.core.refusals import check_location
from recsys_seq.core.run_folders import MARKER_TEMPORARY, mark_growing_folder

STUDY = "study"  # the sweep folder's artifact kind (its marker)
STUDY_FILE = "study_file"  # a file recsys-tune publishes into a claimed sweep folder
DATABASE = "study.db"
TRIALS = "trials"
SUMMARY = "summary.md"
BEST = "best.yaml"
HISTORY = "optimization_history.png"
IMPORTANCES = "param_importances.png"
PARALLEL = "parallel_coordinate.png"
# what a sweep folder may hold: the marker, SQLite's database and its journals, the trials,
# the summary files, the plots, and temporaries of a publish under way
_NAMES = (MARKER_FILE, TRIALS, SUMMARY, BEST, HISTORY, IMPORTANCES, PARALLEL)
_ENTRIES = re.compile(
    "|".join(map(re.escape, _NAMES)) + rf"|{re.escape(DATABASE)}(-journal|-wal|-shm)?|\..+\.tmp-.+"
)


def _in_sweep_folder(path: Path) -> bool:
    marker = read_marker(path.parent)
    return marker is not None and marker.get("artifact") == STUDY


register_kind(STUDY_FILE, _in_sweep_folder)


def claim_sweep_folder(folder: str | Path) -> Path:
    """The absolute sweep folder, marked as a study's: new, empty, or a study's folder holding
    only what recsys-tune writes. Several workers may claim the same folder at once.

    Raises:
        OutputRefused: a file, the working directory or a folder above it, or a folder with
            other content (left untouched).
    """
    folder = check_location(folder, STUDY, True, ())
    if folder.exists() and not folder.is_dir():
        raise OutputRefused(f"Sweep folder {folder} is a file; pick another tune.sweep_dir.")
    # entries before the marker: a worker claiming the folder at this instant may add its
    # marker between the two reads, never remove it
    entries = list(folder.iterdir()) if folder.is_dir() else []
    marker = read_marker(folder) if folder.is_dir() else None
    ours = marker is not None and marker.get("artifact") == STUDY
    # before the marker lands, another worker's claim shows only as its marker temporary
    claimable = _ENTRIES if ours else MARKER_TEMPORARY
    foreign = [e.name for e in entries if not claimable.fullmatch(e.name)]
    if foreign:
        raise OutputRefused(
            f"Sweep folder {folder} already holds {', '.join(sorted(foreign)[:3])}, which "
            "recsys-tune did not write; it is left untouched. Pick another folder with "
            "tune.sweep_dir=<folder> (or another tune.study_name)."
        )
    if not ours:
        mark_growing_folder(folder, STUDY)
    return folder


def publish_text(folder: Path, name: str, text: str) -> Path:
    """Publish ``summary.md`` or ``best.yaml`` into the claimed folder, atomically."""
    return write_text(folder / name, text, STUDY_FILE)
