"""Every reason an output is refused, as :class:`OutputRefused` with a message that says why
and what to do instead: a target that is not the project's to write (a user's file, a folder
with other content, the working directory or a folder above it, an input of the command or a
folder that holds one; :func:`check_target`), and an output file system that refuses the
write (full, read-only, no permission; :func:`output_errors`).

Publishing (:mod:`~recsys_seq.core.publish`) and run folders
(:mod:`~recsys_seq.core.run_folders`) both check with these before and while they write;
what counts as the project's own output is :mod:`~recsys_seq.core.artifacts`'s.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from recsys_seq.core.artifacts import owns_file, owns_folder, read_marker
from recsys_seq.core.errors import UserError

# errors of the output's file system that a user fixes (space, permissions, read-only mount)
_OUTPUT_ERRNOS = {
    errno.ENOSPC,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.EDQUOT,
    errno.ENAMETOOLONG,
}
_NAME_MAX = 255  # bytes in one file name on common file systems
_TEMPORARY_EXTRA = 64  # what a temporary sibling's name adds: ".", ".tmp-<host>-<pid>-<hex>"


class OutputRefused(UserError):
    """The output path is not the project's to write (or replace)."""


def _is_within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_target(
    target: str | Path, kind: str, *, folder: bool, inputs: Iterable[str | Path] = ()
) -> Path:
    """The absolute target path, or :class:`OutputRefused` saying why it may not be written."""
    target = check_location(target, kind, folder, inputs)
    if target.is_symlink() or (target.exists() and not is_replaceable(target, kind, folder)):
        raise OutputRefused(
            f"Output {target} exists and is not {_a(kind.replace('_', ' '))} written by "
            f"recsys-seq ({_describe(target)}); it is left untouched. Remove it yourself or "
            f"name another output {'folder' if folder else 'file'}."
        )
    return target


def check_location(
    target: str | Path, kind: str, folder: bool, inputs: Iterable[str | Path]
) -> Path:
    """Refuse the working directory, a folder above it, an input and a folder holding one."""
    target = Path(os.path.abspath(target))
    what = "folder" if folder else "file"
    if len(os.fsencode(target.name)) + _TEMPORARY_EXTRA > _NAME_MAX:
        raise OutputRefused(
            f"Output name {target.name[:40]}... is too long ({len(target.name)} characters; "
            f"at most {_NAME_MAX - _TEMPORARY_EXTRA}). Name a shorter output {what}."
        )
    if _is_within(Path.cwd().resolve(), target.resolve()):
        raise OutputRefused(
            f"Output {target} is the working directory or a folder above it; publishing there "
            f"would replace everything in it. Name a new {what} (a path inside it)."
        )
    for source in inputs:
        source = Path(os.path.abspath(source)).resolve()
        if _is_within(source, target.resolve()):
            relation = "is" if source == target.resolve() else "holds"
            raise OutputRefused(
                f"Output {target} {relation} the input {source}; writing it would destroy the "
                f"input. Name another output {what}."
            )
        if source.is_dir() and _is_within(target.resolve(), source):
            raise OutputRefused(
                f"Output {target} is inside the input folder {source}, which is only ever "
                f"read. Name an output {what} outside it."
            )
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputRefused(f"Output {target}: {parent} is a file, not a folder.")
            break
    return target


def _a(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def is_replaceable(target: Path, kind: str, folder: bool) -> bool:
    """Whether the existing ``target`` holds nothing but the project's ``kind`` output (an empty
    folder holds nothing to lose)."""
    if folder:
        return target.is_dir() and (not any(target.iterdir()) or owns_folder(target, kind))
    return target.is_file() and owns_file(target, kind)


def _describe(path: Path) -> str:
    if path.is_symlink():
        return "a symbolic link"
    if path.is_dir():
        marker = read_marker(path)
        if marker is not None and owns_folder(path, str(marker.get("artifact"))):
            return f"{_a(str(marker.get('artifact')).replace('_', ' '))} folder"
        return "a folder with other content"
    return "a file"


def is_disk_error(error: BaseException) -> bool:
    """A full disk, missing permission or read-only file system, raised by Python (an OSError)
    or by a library that reports the operating system's code (Polars: ``(os error 28)``)."""
    if isinstance(error, OSError):
        return error.errno in _OUTPUT_ERRNOS
    code = re.search(r"os error (\d+)", str(error))
    return code is not None and int(code[1]) in _OUTPUT_ERRNOS


@contextmanager
def output_errors(target: Path) -> Iterator[None]:
    """Report a full disk, missing permission or read-only file system as the output's fault."""
    try:
        yield
    except Exception as err:
        if isinstance(err, UserError) or not is_disk_error(err):
            raise
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise OutputRefused(
            f"Could not write the output {target}: {reason.strip().splitlines()[0]}. Free "
            "space or pick a writable location; nothing was published and the previous "
            "output is intact."
        ) from None
