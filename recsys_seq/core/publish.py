"""Every output of the project is published by this module: never a partial file, never a
user's file lost.

The rule, for folders (a prepared dataset, a report) and files (recommendations, an export,
``metrics.json``) alike:

1. The output is written to a temporary sibling ``P/.X.tmp-<host>-<pid>-<random>`` (the same
   file system as ``P/X``, so the final rename is atomic).
2. It is published by renaming that sibling onto ``P/X``. A file is replaced in one
   ``os.replace``. A folder that already exists is swapped with the sibling in one step
   (:func:`recsys_seq.core.exchange.exchange`, Linux's ``renameat2(RENAME_EXCHANGE)``), so that
   ``P/X`` exists at every instant for every reader, and the previous output, now in the
   sibling, is removed; where the file system cannot exchange, the previous folder is first
   moved aside to ``P/.X.old-<same tag>`` and removed after the rename.
3. An existing ``X`` is replaced only when it is the project's own artifact of the same kind:
   a folder carrying :data:`MARKER_FILE` of that kind and holding nothing the marker does not
   list, or a file its kind recognises as its own (:func:`register_kind`). Never a user's
   file, a folder with other content, the working directory or a folder above it, an input of
   the command or a folder that holds one: those are refused with :class:`OutputRefused`.

A kill at any instant leaves the previous output or the new one, once :func:`recover` has run;
every publish, and every load of a prepared dataset, runs it first: it puts back a previous
output whose owner died between the two renames and removes temporaries of dead processes.

This module owns the publish itself (:func:`publishing`, and the small files written through
it); the parts it relies on each have their own module: the artifact kinds and markers
(:mod:`~recsys_seq.core.artifacts`), the refusals (:mod:`~recsys_seq.core.refusals`), the
temporaries and :func:`recover` (:mod:`~recsys_seq.core.temporaries`). Run folders
(:mod:`~recsys_seq.core.run_folders`) are claimed rather than published; their names are
importable from here as well, as the other commands import them.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from recsys_seq.core.artifacts import MARKER_FILE, register_folder_kind, register_kind, write_marker
from recsys_seq.core.exchange import exchange
from recsys_seq.core.refusals import (
    OutputRefused,
    check_location,
    check_target,
    is_replaceable,
    output_errors,
)
from recsys_seq.core.run_folders import (
    RUN,
    RUN_FILE,
    check_run_folder,
    claim_run_folder,
    discard_unclaimed_run_folder,
    missing_parents,
)
from recsys_seq.core.temporaries import recover, remove, tag

# imported from here by the other commands and the tests (the publish API in one place)
__all__ = [
    "BENCHMARK",
    "MARKER_FILE",
    "RUN",
    "RUN_FILE",
    "OutputRefused",
    "check_location",
    "check_run_folder",
    "check_target",
    "claim_run_folder",
    "discard_unclaimed_run_folder",
    "missing_parents",
    "output_errors",
    "publishing",
    "recover",
    "register_folder_kind",
    "register_kind",
    "write_rows",
    "write_text",
]


def _after(step: str) -> None:
    """Called after each publish step; tests replace it to kill the process exactly there."""


@contextmanager
def publishing(
    target: str | Path,
    kind: str,
    *,
    folder: bool,
    inputs: Iterable[str | Path] = (),
    keep_existing: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """Yield a temporary sibling of ``target`` to write into; publish it when the block ends.

    Args:
        target: the output folder or file.
        kind: the artifact kind (``prepared_dataset``, ``recommendations``, ...): an existing
            target is replaced only when it is the project's artifact of this kind.
        folder: the output is a folder (created for the block) or a file (the block creates it;
            the temporary path keeps ``target``'s suffix, for writers that go by it).
        inputs: files and folders the command reads; the target may not be or hold one.
        keep_existing: called with the target just before publishing, when it exists; True
            keeps it and discards the new output (e.g. another process published the same
            dataset meanwhile).

    Raises:
        OutputRefused: the target is not the project's to write, or its file system refused.
    """
    inputs = list(inputs)
    target = Path(os.path.abspath(target))
    with output_errors(target):
        recover(target)
        check_target(target, kind, folder=folder, inputs=inputs)
    owner = tag()
    tmp = target.parent / f".{target.name}.tmp-{owner}{'' if folder else target.suffix}"
    with output_errors(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        if folder:
            tmp.mkdir()
        try:
            yield tmp
            _after("written")
            if folder:
                write_marker(tmp, kind)
                _after("marked")
            if keep_existing is not None and target.exists() and keep_existing(target):
                return
            ours = target.exists()  # seen before the check: ours only if the check passes
            check_target(target, kind, folder=folder, inputs=inputs)  # changed meanwhile?
            if folder:
                if ours:
                    _swap_folder(tmp, target, target.parent / f".{target.name}.old-{owner}", kind)
                else:
                    _place_folder(tmp, target)
            else:
                _place_file(tmp, target, ours)
                _after("replaced")
        finally:
            if tmp.exists():
                remove(tmp)


def _changed_meanwhile(target: Path, what: str = "appeared") -> OutputRefused:
    return OutputRefused(
        f"Output {target} {what} while it was being written (another program?); it is left "
        "untouched and nothing was published. Run the command again."
    )


def _place_file(tmp: Path, target: Path, ours: bool) -> None:
    """Move ``tmp`` to ``target``: replacing it only when it was checked to be ours, else
    with a hard link that fails if somebody created ``target`` since the check."""
    if ours:
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise _changed_meanwhile(target) from None
    except OSError:  # a file system without hard links: the plain rename
        os.rename(tmp, target)
        return
    tmp.unlink()


def _place_folder(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` to the new ``target``; the rename fails on anything created at ``target``
    since the check (but an empty folder, which loses nothing)."""
    try:
        os.rename(tmp, target)
    except OSError as error:
        if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise _changed_meanwhile(target) from None
        raise
    _after("moved_new")


def _swap_folder(tmp: Path, target: Path, old: Path, kind: str) -> None:
    """Put ``tmp`` in place of our existing ``target``: swapped in one step where the file
    system can, else ``target`` moved aside to ``old`` first. Either way the previous output
    is checked once more where nobody else reaches it by its name: when something was added
    to it since the check, it goes back and nothing is published."""
    if exchange(tmp, target):
        _after("exchanged")
        if not is_replaceable(tmp, kind, folder=True):
            exchange(tmp, target)
            raise _changed_meanwhile(target, "changed")
        old = tmp
    else:
        os.rename(target, old)
        _after("moved_old")
        if not is_replaceable(old, kind, folder=True):
            os.rename(old, target)
            raise _changed_meanwhile(target, "changed")
        _place_folder(tmp, target)
    shutil.rmtree(old)
    _after("removed_old")


def write_text(target: str | Path, text: str, kind: str) -> Path:
    """Publish a small text file (``metrics.json``, ``config.yaml``) atomically."""
    with publishing(target, kind, folder=False) as tmp:
        tmp.write_text(text)
    return Path(os.path.abspath(target))


BENCHMARK = "benchmark"


def _is_benchmark(path: Path) -> bool:
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(content, dict) and set(content) == {BENCHMARK, "rows"}


register_kind(BENCHMARK, _is_benchmark)


def write_rows(target: str | Path, rows: list[dict], benchmark: str) -> Path:
    """Publish benchmark rows as ``{"benchmark": <task>, "rows": [...]}`` (JSON)."""
    text = json.dumps({BENCHMARK: benchmark, "rows": rows}, indent=2, default=str) + "\n"
    return write_text(target, text, BENCHMARK)
