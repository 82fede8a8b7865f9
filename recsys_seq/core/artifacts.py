"""The project's own artifacts: which kinds of output exist and how an existing file or folder
is recognised as one the project wrote, so that only such an output is ever replaced.

* A folder artifact (a prepared dataset, a report) carries :data:`MARKER_FILE`, naming its kind
  and listing its files; its kind declares the names its files may have
  (:func:`register_folder_kind`).
* A file artifact (recommendations, an export, ``metrics.json``) has no room for a marker: its
  kind declares how to recognise the project's file from its content (:func:`register_kind`).

Each kind is registered by the module that writes it. The refusals built on this (a user's
file, a folder with other content) are :mod:`recsys_seq.core.refusals`'s; publishing is
:mod:`recsys_seq.core.publish`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

MARKER_FILE = ".recsys-seq.json"
"""Inside every folder the project publishes: ``{"artifact": <kind>, "files": [...]}``."""

FileRecogniser = Callable[[Path], bool]
_FILE_KINDS: dict[str, FileRecogniser] = {}
_FOLDER_KINDS: dict[str, re.Pattern] = {}


def register_kind(kind: str, recognise: FileRecogniser) -> None:
    """Declare a file kind and how to tell an existing file of that kind written by the project
    (from its content: a metadata key, a header) from anybody else's file."""
    _FILE_KINDS[kind] = recognise


def register_folder_kind(kind: str, names: str) -> None:
    """Declare a folder kind and the names (a regular expression) its files may have.

    A marker is a claim anybody can write: a folder is replaced only when every entry in it is
    listed by its marker AND named like a file of its kind, so a planted marker never makes
    the project delete a file it could not have written."""
    _FOLDER_KINDS[kind] = re.compile(names)


def owns_file(path: Path, kind: str) -> bool:
    """Whether the file ``path`` is recognised by its kind as the project's ``kind`` file."""
    recognise = _FILE_KINDS.get(kind)
    return recognise is not None and recognise(path)


def read_marker(folder: Path) -> dict | None:
    """The folder's marker, or None when it has none (or an unreadable one)."""
    try:
        marker = json.loads((folder / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def owns_folder(folder: Path, kind: str) -> bool:
    """Whether ``folder`` is the project's ``kind`` artifact with nothing added to it."""
    marker = read_marker(folder)
    if marker is None or marker.get("artifact") != kind:
        return False
    names = _FOLDER_KINDS.get(kind)
    files = marker.get("files")
    if names is None or not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return False
    listed = set(files) | {MARKER_FILE}
    return all(
        entry.name == MARKER_FILE or (entry.name in listed and names.fullmatch(entry.name))
        for entry in folder.iterdir()
    )


def write_marker(folder: Path, kind: str) -> None:
    """Mark ``folder`` as the project's ``kind`` artifact holding what it holds now."""
    files = sorted(entry.name for entry in folder.iterdir() if entry.name != MARKER_FILE)
    text = json.dumps({"artifact": kind, "files": files}, indent=2) + "\n"
    (folder / MARKER_FILE).write_text(text)
